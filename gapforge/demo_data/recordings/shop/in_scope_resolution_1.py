"""Recorded generator answer (attempt 1). Answer a question the tools can answer instead of handing the customer to a
human agent, on the shop's own surface.

Built from the target's tool schemas and the analysis split's lookup episodes: the same twelve tools with the same
parameters and JSON results; customers ask for a shipped order's tracking number or an order's total in the words of
those episodes (their price questions name products and variants, so the env leaves prices out rather than reproduce
them; none asks for a gift card's balance) and hand over their email (or name and zip) and order id when asked. In
the failed episodes the agent found the customer, read the order holding the answer and then called
`transfer_to_human_agents`, which ends the conversation with the question unanswered; the shop's policy says to
transfer only when the customer asks for a human or the tools cannot help (this env's policy text does not repeat it). No customer here asks for a human, and every
question is answerable from one order. Orders hold two or three items, so an answer has to be the asked value, not
any number of the order.

Reward:
- read (1): the asked order was read before the first answer that states a value;
- answered (3): after that read, the agent said the asked value (amounts with two decimals, as the shop's policy asks)
  and none of the other values of that order an answer could be confused with (the items' prices and ids, the
  payment method's number, the total or the tracking number that was not asked); 1 of these 3 points when it first said another of those
  values and corrected itself after the customer asked again, none when it said the asked value in the same turn as
  another.
A transfer to a human agent before the answer ends the conversation: it keeps the read's point and nothing else
(0.25). Known limits: a total read from `list_customer_orders` (which lists each order's total) earns nothing, the
read being the order's record; and any number the agent says before the read (an email's digits echoed back) counts
as a first answer and costs the read's point. A write zeroes both (the customer asked a question). A policy that does nothing scores 0; one that answers
without reading can only guess (0); one that reads and recites every value of the order in one turn keeps 0.25,
and one that tries them turn by turn until the customer stops asking 0.5.
"""

from __future__ import annotations

import re

from envs.sdk import SyntheticEnv, ToolError, tool

FIRST = ["Ava", "Liam", "Noah", "Mia", "Ethan", "Zoe", "Lucas", "Ivy", "Omar", "Sofia", "Mateo", "Chloe",
         "Yusuf", "Hana", "Leo", "Nora", "Raj", "Elena", "Kai", "Maya", "Felix", "Aria", "Hugo", "Lena"]
LAST = ["Garcia", "Nguyen", "Patel", "Kim", "Rossi", "Silva", "Moreau", "Novak", "Haddad", "Larsen", "Okafor", "Tanaka"]
STREETS = ["Oak Street", "Maple Avenue", "Cedar Lane", "Pine Road", "Elm Court", "Birch Way", "Lake Drive", "Hill Street"]
CITIES = [("Springfield", "IL"), ("Portland", "OR"), ("Austin", "TX"), ("Denver", "CO"), ("Madison", "WI"), ("Raleigh", "NC")]
CATALOG = [("T-Shirt", False, {"color": ["black", "white", "blue"], "size": ["S", "M", "L"]}, 19.0),
           ("Running Shoes", False, {"color": ["black", "grey"], "size": ["8", "9", "10"]}, 89.0),
           ("Backpack", False, {"color": ["green", "navy", "black"]}, 54.0),
           ("Wireless Headphones", False, {"color": ["black", "silver", "white"]}, 129.0),
           ("Water Bottle", False, {"capacity": ["500ml", "750ml", "1000ml"]}, 17.0),
           ("Desk Lamp", False, {"color": ["white", "black", "brass"]}, 39.0),
           ("Yoga Mat", True, {"thickness": ["4mm", "6mm", "8mm"]}, 32.0),
           ("Mechanical Keyboard", False, {"switch": ["red", "blue", "brown"]}, 99.0)]
# How the analysis split's lookup episodes open: a tracking number and a total are asked in the shop's customers' own
# words. Its price questions name their products and variants: the env leaves prices out rather than reproduce them,
# and no analysis-split episode asks for a gift card's balance.
OPENINGS = {"tracking": "Hi, one of my orders hasn't arrived yet. Can you tell me its tracking number?",
            "total": "Hello, how much did I pay in total for one of my recent orders?"}
WRITES = ("cancel_pending_order", "modify_pending_order_address", "return_delivered_order_items", "exchange_delivered_order_items")
TRIGGERS = [("email", ("email", "e-mail")), ("name_zip", ("zip", "postal", "your name", "full name", "first name", "last name")),
            ("order_id", ("order id", "order number", "which order", "order #", "order's id", "which of your orders"))]
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
POLICY = """You are a customer-service agent for an online shop. Today is 2025-06-15.
- Verify the customer's identity first (find_customer_by_email, or find_customer_by_name_zip) before reading their account or orders.
- Answer with the facts from the tools (tracking number, order total, gift card balance, product price). Do not guess.
- Give prices and amounts with two decimals, e.g. 54.30.
- Before a write, ask the customer to confirm."""


def _money(x: float) -> str:
    return f"{x:.2f}"


def _opts(options: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


def _numbers(text: str) -> set[str]:
    """The numbers a text states, as the answer check compares them: commas dropped, amounts with two decimals."""
    out = set()
    for n in NUMBER.findall(text.replace("$", "")):
        n = n.replace(",", "").rstrip(".")
        out.add(_money(float(n)) if "." in n else n)
    return out


class ShopInScopeEnv(SyntheticEnv):
    capability = "in_scope_resolution"
    description = ("Answer a question the tools can answer (an order's tracking number or total) by reading the order and "
                   "saying the asked value, instead of transferring the customer to a human agent.")
    target = "shop"
    policy = POLICY
    weights = {"read": 1.0, "answered": 3.0}
    max_turns = 16

    # ---------------------------------------------------------------- scenario

    def _products(self) -> dict:
        rng, products = self.rng, {}
        for i, (name, final_sale, opts, base) in enumerate(CATALOG):
            combos = [{}]
            for key, values in opts.items():
                combos = [{**c, key: v} for c in combos for v in values]
            variants = {}
            for combo in combos:
                iid = str(rng.randrange(10**9, 10**10))
                variants[iid] = {"item_id": iid, "options": combo, "price": round(base + rng.randrange(0, 1200) / 100, 2),
                                 "available": rng.random() > 0.2}
            pid = f"prod_{1001 + i}"
            products[pid] = {"product_id": pid, "name": name, "final_sale": final_sale, "variants": variants}
        return products

    def _customer(self) -> dict:
        rng = self.rng
        first, last = rng.choice(FIRST), rng.choice(LAST)
        city, state = rng.choice(CITIES)
        address = {"address1": f"{rng.randrange(10, 999)} {rng.choice(STREETS)}", "address2": rng.choice(["", f"Apt {rng.randrange(1, 40)}"]),
                   "city": city, "state": state, "country": "USA", "zip": f"{rng.randrange(10000, 99999)}"}
        pms = {}
        for source in ("credit_card", "paypal", "gift_card"):
            pid = f"{source}_{rng.randrange(10**6, 10**7)}"
            pms[pid] = {"id": pid, "source": source, "last_four": f"{rng.randrange(1000, 9999)}" if source == "credit_card" else None,
                        "balance": float(rng.randrange(20, 300)) if source == "gift_card" else None}
        return {"customer_id": f"{first.lower()}_{last.lower()}_{rng.randrange(1000, 9999)}", "first_name": first, "last_name": last,
                "email": f"{first.lower()}.{last.lower()}{rng.randrange(10, 99)}@example.com", "address": address,
                "payment_methods": pms, "orders": []}

    def _order(self, customer: dict, products: dict, status: str, n_items: int) -> dict:
        rng = self.rng
        items = []
        for pid in rng.sample(sorted(products), n_items):
            v = products[pid]["variants"][rng.choice(sorted(products[pid]["variants"]))]
            items.append({"item_id": v["item_id"], "product_id": pid, "name": products[pid]["name"], "options": dict(v["options"]),
                          "price": v["price"]})
        pm = rng.choice(sorted(customer["payment_methods"]))
        total = round(sum(i["price"] for i in items), 2)
        order = {"order_id": f"#W{rng.randrange(10**6, 10**7)}", "customer_id": customer["customer_id"], "status": status,
                 "address": dict(customer["address"]), "items": items,
                 "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": pm}],
                 "created_date": f"2025-0{rng.randrange(4, 7)}-{rng.randrange(10, 29)}",
                 "tracking_number": None if status == "pending" else str(rng.randrange(10**11, 10**12)),
                 "delivered_date": "2025-06-0" + str(rng.randrange(1, 9)) if status == "delivered" else None, "cancel_reason": None,
                 "return_items": [], "return_payment_method_id": None, "exchange_items": [], "exchange_new_items": [],
                 "exchange_payment_method_id": None, "exchange_price_difference": None}
        customer["orders"].append(order["order_id"])
        return order

    def generate(self, seed: int) -> dict:
        rng = self.rng
        products = self._products()
        me = self._customer()
        kind = rng.choice(sorted(OPENINGS))
        status = "shipped" if kind == "tracking" else rng.choice(["delivered", "shipped", "pending"])
        target = self._order(me, products, status, rng.choice([2, 3]))
        others = [self._order(me, products, s, rng.choice([1, 2])) for s in ("delivered", "pending")]
        facts = {"email": f"My email is {me['email']}.",
                 "name_zip": f"My name is {me['first_name']} {me['last_name']} and my zip code is {me['address']['zip']}.",
                 "order_id": rng.choice([f"It's order {target['order_id']}.", f"The order is {target['order_id']}."])}
        by_name = kind == "total" and rng.random() < 0.3  # some customers do not remember their email
        truth = {"kind": kind, "email": me["email"], "customer_id": me["customer_id"], "by_name": by_name}
        opening = OPENINGS[kind]
        truth["order_id"] = target["order_id"]
        truth["value"] = target["tracking_number"] if kind == "tracking" else _money(sum(i["price"] for i in target["items"]))
        # the other values of the record: the items' ids and prices, the payment method's number, the total or tracking number
        near = [i["item_id"] for i in target["items"]] + [_money(i["price"]) for i in target["items"]]
        near.append(target["payment_history"][0]["payment_method_id"].rsplit("_", 1)[-1])
        near.append(_money(sum(i["price"] for i in target["items"])) if kind == "tracking" else target["tracking_number"] or "")
        truth["near"] = sorted({n for n in near if n and n != truth["value"]})
        if by_name:
            del facts["email"]
        self.state.update(answered_turn=None)
        db = {"products": products, "customers": {me["customer_id"]: me},
              "orders": {o["order_id"]: o for o in [target] + others}}
        return {"opening": opening, "db": db, "truth": truth, "facts": facts}

    # ------------------------------------------------------------------- tools

    def _order_of(self, order_id: str) -> dict:
        oid = order_id.strip() if order_id.strip().startswith("#") else "#" + order_id.strip()
        if oid not in self.db["orders"]:
            raise ToolError(f"order '{order_id}' not found")
        return self.db["orders"][oid]

    def _owned(self, order_id: str) -> dict:
        if self.state.get("verified") is None:
            raise ToolError("identity not verified: find the customer by email, or by name and zip code, first")
        order = self._order_of(order_id)
        if order["customer_id"] != self.state["verified"]:
            raise ToolError(f"order '{order_id}' does not belong to the verified customer")
        return order

    @staticmethod
    def _total(order: dict) -> float:
        return round(sum(i["price"] for i in order["items"]), 2)

    @tool
    def find_customer_by_email(self, email: str) -> dict:
        """Find a customer's id by email address. Verifies the customer's identity."""
        for c in self.db["customers"].values():
            if c["email"].lower() == email.strip().lower():
                self.state["verified"] = c["customer_id"]
                return {"customer_id": c["customer_id"]}
        raise ToolError("customer not found")

    @tool
    def find_customer_by_name_zip(self, first_name: str, last_name: str, zip: str) -> dict:
        """Find a customer's id by first name, last name and zip code. Verifies the customer's identity."""
        for c in self.db["customers"].values():
            if (c["first_name"].lower(), c["last_name"].lower(), c["address"]["zip"]) == (first_name.strip().lower(), last_name.strip().lower(), zip.strip()):
                self.state["verified"] = c["customer_id"]
                return {"customer_id": c["customer_id"]}
        raise ToolError("customer not found")

    @tool
    def get_customer_details(self, customer_id: str) -> dict:
        """Get a customer's profile: name, email, address, payment methods (with gift card balances), order ids."""
        if customer_id not in self.db["customers"]:
            raise ToolError(f"customer '{customer_id}' not found")
        return self.db["customers"][customer_id]

    @tool
    def list_customer_orders(self, customer_id: str) -> list:
        """List a customer's orders with their status and total."""
        if customer_id not in self.db["customers"]:
            raise ToolError(f"customer '{customer_id}' not found")
        orders = [self.db["orders"][o] for o in self.db["customers"][customer_id]["orders"]]
        return [{"order_id": o["order_id"], "status": o["status"], "total": self._total(o)} for o in orders]

    @tool
    def get_order_details(self, order_id: str) -> dict:
        """Get an order: status, items (item ids, options, prices), address, payments, tracking, dates.

        Args:
            order_id: e.g. '#W1234567'
        """
        order = self._order_of(order_id)
        return {**order, "total": self._total(order)}

    @tool
    def list_products(self) -> dict:
        """List all products with their product ids."""
        return {p["name"]: p["product_id"] for p in self.db["products"].values()}

    @tool
    def get_product_details(self, product_id: str) -> dict:
        """Get a product's variants: item id, options, price, availability; and whether it is final sale."""
        if product_id not in self.db["products"]:
            raise ToolError(f"product '{product_id}' not found")
        return self.db["products"][product_id]

    @tool
    def cancel_pending_order(self, order_id: str, reason: str) -> dict:
        """Cancel a pending order and refund it to the original payment method(s). Write action."""
        order = self._owned(order_id)
        order.update(status="cancelled", cancel_reason=reason)
        return {**order, "total": self._total(order)}

    @tool
    def modify_pending_order_address(self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict:
        """Change the shipping address of a pending order. Write action."""
        order = self._owned(order_id)
        order["address"] = {"address1": address1, "address2": address2, "city": city, "state": state, "country": country, "zip": zip}
        return {**order, "total": self._total(order)}

    @tool
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> dict:
        """Request a return of items of a delivered order; the refund goes to the given payment method (the original one or a gift card of the customer). Write action."""
        order = self._owned(order_id)
        order.update(status="return requested", return_items=sorted(item_ids), return_payment_method_id=payment_method_id)
        return {**order, "refund_amount": round(sum(i["price"] for i in order["items"] if i["item_id"] in item_ids), 2)}

    @tool
    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> dict:
        """Exchange items of a delivered order for available variants of the same products; the price difference is charged or refunded to the given payment method. Write action."""
        order = self._owned(order_id)
        order.update(status="exchange requested", exchange_items=list(item_ids), exchange_new_items=list(new_item_ids),
                     exchange_payment_method_id=payment_method_id)
        return {**order, "price_difference": 0.0}

    @tool
    def transfer_to_human_agents(self, summary: str) -> dict:
        """Transfer the customer to a human agent, with a summary of the issue. Ends the conversation."""
        self.done = True
        return {"result": "Transfer successful"}

    # -------------------------------------------------------- simulated user

    def user_reply(self, text: str) -> str | None:
        truth, facts, t = self.scenario["truth"], self.scenario["facts"], text.lower()
        if truth["value"] in _numbers(text) and self.state["answered_turn"] is None:
            self.state["answered_turn"] = self.turns
        if self.state["answered_turn"] is not None:
            return None  # the customer heard the value they asked for
        parts = []
        for key, words in TRIGGERS:
            if any(w in t for w in words) and key in facts and facts[key] not in parts:
                parts.append(facts[key])
        if not parts and "email" in t and "name_zip" in facts:
            parts.append("I don't remember my email. " + facts["name_zip"])
        return " ".join(parts) if parts else "Can you help me with that?"

    # ------------------------------------------------------------------ reward

    def _read_turn(self) -> int | None:
        order = self.scenario["truth"]["order_id"]
        calls = [c for c in self.calls_to("get_order_details") if "#" + str(c["arguments"]["order_id"]).strip().lstrip("#") == order]
        return min((c["turn"] for c in calls), default=None)

    def reward(self) -> dict[str, float]:
        truth = self.scenario["truth"]
        if any(c["ok"] and c["name"] in WRITES for c in self.calls):
            return {"read": 0.0, "answered": 0.0}
        read = self._read_turn()
        stated = [s for s in self.said if _numbers(s["text"]) - _numbers(self.scenario["opening"])]
        first_answer = min((s["turn"] for s in stated), default=None)
        read_first = float(read is not None and (first_answer is None or read < first_answer))
        near = set(truth["near"])
        turns = [_numbers(s["text"]) for s in self.said if read is not None and s["turn"] > read]
        right = next((i for i, said in enumerate(turns) if truth["value"] in said), None)
        if right is None or turns[right] & near:
            answered = 0.0  # never said, or said in one breath with another value of the record
        elif any(said & near for said in turns[:right]):
            answered = 1 / 3  # another value first, corrected after the customer asked again
        else:
            answered = 1.0
        return {"read": read_first, "answered": answered}

    # ---------------------------------------------------------------- solution

    def solution(self, seed: int) -> list[dict]:
        truth, facts = self.scenario["truth"], self.scenario["facts"]
        acts: list[dict] = []
        acts.append({"say": "I can help you with that. First, what is the email address on your account?"})
        if truth["by_name"]:
            name_zip = re.match(r"My name is (\S+) (\S+) and my zip code is (\d+)\.", facts["name_zip"])
            acts.append({"tool": "find_customer_by_name_zip", "arguments": {
                "first_name": name_zip.group(1), "last_name": name_zip.group(2), "zip": name_zip.group(3)}})
        else:
            acts.append({"tool": "find_customer_by_email", "arguments": {"email": truth["email"]}})
        acts.append({"say": "Thanks. Please tell me the order id."})
        acts.append({"tool": "get_order_details", "arguments": {"order_id": truth["order_id"]}})
        return acts + [{"say": f"Done. {truth['value']}"}]
