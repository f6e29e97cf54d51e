"""Recorded generator answer (attempt 2, rewritten on the target's surface after the result-format
evidence of attempt 1). Check an order's eligibility before acting on it, on the shop's own surface.

Built from the target's tool schemas and its stored episodes: the same twelve tools in the same
order with the same parameters and JSON results, customers who open the way the shop's customers
do and hand over their email, order id and other facts when asked. The back end does NOT enforce
the shop's rules (only pending orders can be cancelled or re-addressed, only delivered orders
returned within 30 days, no final-sale returns, no sold-out exchange targets): the agent must
look the order up (and the product, where the rule is about it) before it writes or promises
anything, then either act or refuse with the reason. Half of the requests are ineligible, and the
opening never tells which half.

Reward, concentrated on the capability's own decisions:
- checked_first (3): the order (and the product, where the rule is about it) was looked up before
  any write and before any reply that settles the request (a promise or a refusal); 0.5 if it was
  looked up but nothing was ever settled; 0 if something was promised or written first;
- decision (1): ineligible -> nothing written and a refusal after the check; eligible -> the
  requested write on the requested order after the check (0.25 without the check; its details are
  not this capability's);
- informed (1): ineligible -> the reason (status, '30', 'final sale', 'available') said after the
  check; eligible -> the customer confirmed before the write;
- a wrong decision zeroes every component: a write the rules forbid (collateral damage), a
  promise of what the rules forbid, and a refusal of an allowed request (the customer leaves
  unserved). Guessing either way loses as much as it wins: only checking pays.
A policy that does nothing, promises without acting, or writes without checking scores near 0.
"""

from __future__ import annotations

from typing import Literal

from envs.sdk import SyntheticEnv, ToolError, tool

TODAY = "2025-06-15"
FACTS_UP_FRONT = 0.5  # share of openings that already give the email and the order id
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
# kind -> the openings shop customers use for it ({name} / {lower}: the item's product name)
KINDS = {
    "cancel": ["Hi, I want to cancel my order, I don't need it anymore.", "Hi, I'd like to cancel an order I placed recently."],
    "address": ["Hello, I need to send one of my orders to a different address.",
                "Hello, I moved and need to change the shipping address of an order that hasn't shipped yet."],
    "return": ["Hi, I'd like to return an item from an older order.", "Hi, I'd like to return something from an order I received.",
               "Hi, I'd like to return the {lower} I bought."],
    "exchange": ["Hi, I received my order but I'd like to exchange an item for a different variant.",
                 "Hi, I'd like to exchange the {name} I received for another variant."],
}
WRITES = ("cancel_pending_order", "modify_pending_order_address", "return_delivered_order_items", "exchange_delivered_order_items")
REFUSAL = ("cannot", "can't", "can not", "unable", "not eligible", "ineligible", "not possible", "not able", "not allowed",
           "unfortunately", "not available", "unavailable", "only pending", "only delivered")
SETTLED = REFUSAL + ("all set", "taken care", "done", "processed", "completed", "cancelled", "canceled", "changed", "returned",
                     "exchanged", "updated")
CONFIRM = ("confirm", "proceed", "go ahead", "shall i", "should i", "would you like me to", "do you want me to", "yes/no",
           "(yes", "is that correct", "is this correct", "is that right")
TRIGGERS = [("email", ("email", "e-mail")), ("name_zip", ("zip", "postal", "your name", "full name")),
            ("order_id", ("order id", "order number", "which order", "order #", "order's id", "which of your orders")),
            ("items", ("which item", "which product", "what item", "which of the items", "item would you like", "which one")),
            ("reason", ("reason", "why")), ("address", ("address",)),
            ("exchange_target", ("which variant", "what size", "what color", "which size", "which color", "new variant", "instead",
                                 "prefer", "replace")),
            ("payment", ("payment method", "refund to", "refunded to", "gift card", "original payment", "which card", "price difference",
                         "charge", "refund method"))]
POLICY = """You are a customer-service agent for an online shop. Today is 2025-06-15.
The order system does NOT check the rules below: check them yourself before acting or promising anything.
- Verify the customer's identity first (find_customer_by_email, or find_customer_by_name_zip).
- Only pending orders can be cancelled (reason 'no longer needed' or 'ordered by mistake') or get a new address.
- Only delivered orders can be returned or exchanged, and only within 30 days of delivery (on or after 2025-05-16).
- Final-sale products cannot be returned; an exchange needs an available variant of the same product.
- Before a write, ask the customer to confirm; if a request breaks a rule, do not act: say which rule it breaks."""


def _date(days_before: int) -> str:
    month_days = [31, 28, 31, 30, 31, 30]
    doy, month = sum(month_days[:5]) + 15 - days_before, 0
    while doy > month_days[month]:
        doy -= month_days[month]
        month += 1
    return f"2025-{month + 1:02d}-{doy:02d}"


def _opts(options: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


class ShopPreconditionEnv(SyntheticEnv):
    capability = "precondition_verification"
    description = ("Before acting on (or promising) a cancellation, an address change, a return or an exchange, look the "
                   "order up and check that the request is allowed (order status, 30-day window, final sale, availability); "
                   "act only when it is, refuse with the reason otherwise.")
    target = "shop"
    policy = POLICY
    weights = {"checked_first": 3.0, "decision": 1.0, "informed": 1.0}
    max_turns = 20

    # ---------------------------------------------------------------- scenario

    def _products(self) -> dict:
        rng, products = self.rng, {}
        for i, (name, final_sale, opts, base) in enumerate(CATALOG):
            combos = [{}]
            for key, values in opts.items():
                combos = [{**c, key: v} for c in combos for v in values]
            variants = {}
            for v_idx, combo in enumerate(combos):
                iid = str(rng.randrange(10**9, 10**10))
                variants[iid] = {"item_id": iid, "options": combo, "price": round(base + rng.randrange(0, 1200) / 100, 2),
                                 "available": v_idx != 1 and rng.random() > 0.15}
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
            if source == "credit_card" or rng.random() < 0.6:
                pid = f"{source}_{rng.randrange(10**6, 10**7)}"
                pms[pid] = {"id": pid, "source": source, "last_four": f"{rng.randrange(1000, 9999)}" if source == "credit_card" else None,
                            "balance": float(rng.randrange(20, 300)) if source == "gift_card" else None}
        return {"customer_id": f"{first.lower()}_{last.lower()}_{rng.randrange(1000, 9999)}", "first_name": first, "last_name": last,
                "email": f"{first.lower()}.{last.lower()}{rng.randrange(10, 99)}@example.com", "address": address,
                "payment_methods": pms, "orders": []}

    def _order(self, customer: dict, products: dict, status: str, ago: int, pick: list[str]) -> dict:
        rng = self.rng
        items = []
        for pid in pick:
            v = products[pid]["variants"][rng.choice(sorted(products[pid]["variants"]))]
            items.append({"item_id": v["item_id"], "product_id": pid, "name": products[pid]["name"], "options": dict(v["options"]),
                          "price": v["price"]})
        pm = rng.choice(sorted(customer["payment_methods"]))
        total = round(sum(i["price"] for i in items), 2)
        order = {"order_id": f"#W{rng.randrange(10**6, 10**7)}", "customer_id": customer["customer_id"], "status": status,
                 "address": dict(customer["address"]), "items": items,
                 "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": pm}],
                 "created_date": _date(ago + 5), "tracking_number": None if status in ("pending", "processed") else str(rng.randrange(10**11, 10**12)),
                 "delivered_date": _date(ago) if status == "delivered" else None, "cancel_reason": None, "return_items": [],
                 "return_payment_method_id": None, "exchange_items": [], "exchange_new_items": [], "exchange_payment_method_id": None,
                 "exchange_price_difference": None}
        customer["orders"].append(order["order_id"])
        return order

    def generate(self, seed: int) -> dict:
        rng = self.rng
        products = self._products()
        me = self._customer()
        kind = rng.choice(sorted(KINDS))
        eligible = rng.random() < 0.5
        normal = sorted(p for p in products if not products[p]["final_sale"])
        status, ago, why, pick = "pending", rng.randrange(1, 6), "", rng.sample(normal, 2)
        if kind in ("cancel", "address") and not eligible:
            status = rng.choice(["shipped", "processed"] + (["delivered"] if kind == "cancel" else []))
            why = status
        if kind in ("return", "exchange"):
            status, ago = "delivered", rng.randrange(3, 25)
            if not eligible:
                why = "30" if kind == "return" else "available"
                if kind == "return" and rng.random() < 0.5:
                    why, pick = "final sale", [next(p for p in products if products[p]["final_sale"]), pick[0]]
                elif kind == "return":
                    ago = rng.randrange(40, 90)
        target = self._order(me, products, status, ago, pick)
        others = [self._order(me, products, s, rng.randrange(3, 25), rng.sample(normal, 2)) for s in ("delivered", "shipped")]
        truth = {"kind": kind, "eligible": eligible, "why": why, "order_id": target["order_id"], "email": me["email"],
                 "customer_id": me["customer_id"]}
        item = target["items"][0]
        facts = {"email": f"My email is {me['email']}.",
                 "name_zip": f"My name is {me['first_name']} {me['last_name']} and my zip code is {me['address']['zip']}.",
                 "order_id": rng.choice([f"It's order {target['order_id']}.", f"The order id is {target['order_id']}."])}
        if kind == "cancel":
            truth["reason"] = rng.choice(["no longer needed", "ordered by mistake"])
            facts["reason"] = f"The reason is: {truth['reason']}."
        elif kind == "address":
            new = {"address1": f"{rng.randrange(100, 999)} Harbor Boulevard", "address2": f"Suite {rng.randrange(2, 30)}",
                   "city": "Columbus", "state": "OH", "country": "USA", "zip": f"{rng.randrange(43200, 43299)}"}
            truth["address"] = new
            facts["address"] = (f"The new address is: {new['address1']}, {new['address2']}, {new['city']}, {new['state']}, "
                                f"{new['country']}, zip {new['zip']}.")
        elif kind == "return":
            truth.update(item_ids=[item["item_id"]], product_id=item["product_id"],
                         payment_method_id=target["payment_history"][0]["payment_method_id"])
            facts["items"] = f"I want to return the {item['name']} ({_opts(item['options'])})."
            facts["payment"] = "Refund it to the original payment method, please."
        else:
            variants = products[item["product_id"]]["variants"]
            choice = [v for v in sorted(variants) if v != item["item_id"] and variants[v]["available"] == eligible]
            if not choice:  # no variant of the wanted availability: make one
                choice = [next(v for v in sorted(variants) if v != item["item_id"])]
                variants[choice[0]]["available"] = eligible
            new_id = rng.choice(choice)
            truth.update(item_ids=[item["item_id"]], new_item_ids=[new_id], product_id=item["product_id"],
                         payment_method_id=target["payment_history"][0]["payment_method_id"])
            facts["items"] = f"I want to exchange the {item['name']} ({_opts(item['options'])})."
            facts["exchange_target"] = f"I want it with {_opts(variants[new_id]['options'])} instead, nothing else."
            facts["payment"] = "Use the original payment method of the order."
        opening = rng.choice(KINDS[kind]).format(name=item["name"], lower=item["name"].lower())
        up_front = rng.random() < FACTS_UP_FRONT
        if up_front:
            opening += f" {me['email']} {target['order_id']}"
        self.state.update(confirmed_turn=None, up_front=up_front)
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
    def cancel_pending_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> dict:
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
        known = {i["item_id"] for i in order["items"]}
        if not item_ids or len(set(item_ids)) != len(item_ids) or not set(item_ids) <= known:
            raise ToolError(f"items {sorted(set(item_ids) - known)} are not in order {order['order_id']}")
        if payment_method_id not in self.db["customers"][order["customer_id"]]["payment_methods"]:
            raise ToolError(f"payment method '{payment_method_id}' not found for this customer")
        order.update(status="return requested", return_items=sorted(item_ids), return_payment_method_id=payment_method_id)
        return {**order, "refund_amount": round(sum(i["price"] for i in order["items"] if i["item_id"] in item_ids), 2)}

    @tool
    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> dict:
        """Exchange items of a delivered order for available variants of the same products; the price difference is charged or refunded to the given payment method. Write action."""
        order = self._owned(order_id)
        known = {i["item_id"]: i for i in order["items"]}
        if not item_ids or len(item_ids) != len(new_item_ids) or not set(item_ids) <= set(known):
            raise ToolError("item_ids and new_item_ids must have the same length and name items of the order")
        diff = 0.0
        for old, new in zip(item_ids, new_item_ids):
            variant = self.db["products"][known[old]["product_id"]]["variants"].get(new)
            if variant is None or new == old:
                raise ToolError(f"new item '{new}' is not another variant of the same product as '{old}'")
            diff += variant["price"] - known[old]["price"]
        order.update(status="exchange requested", exchange_items=list(item_ids), exchange_new_items=list(new_item_ids),
                     exchange_payment_method_id=payment_method_id, exchange_price_difference=round(diff, 2))
        return {**order, "price_difference": round(diff, 2)}

    @tool
    def transfer_to_human_agents(self, summary: str) -> dict:
        """Transfer the customer to a human agent, with a summary of the issue. Ends the conversation."""
        self.done = True
        return {"result": "Transfer successful"}

    # -------------------------------------------------------- simulated user

    def user_reply(self, text: str) -> str | None:
        t, facts = text.lower(), self.scenario["facts"]
        if self._satisfied():
            return None
        if any(c in t for c in CONFIRM) and not any(w in t for w in ("email", "zip", "your name")):
            if self.state["confirmed_turn"] is None:
                self.state["confirmed_turn"] = self.turns
            return "Yes, please go ahead."
        parts = []
        for key, words in TRIGGERS:
            scan = t.replace("email address", "") if key == "address" else t
            if any(w in scan for w in words) and key in facts and facts[key] not in parts:
                parts.append(facts[key])
        return " ".join(parts) if parts else "Can you help me with that?"

    def _satisfied(self) -> bool:
        heard = " ".join(s["text"] for s in self.said).lower()
        if self.scenario["truth"]["eligible"]:
            return bool(self._writes()) and any(s["turn"] > self._writes()[0]["turn"] for s in self.said)
        return any(w in heard for w in REFUSAL)

    # ------------------------------------------------------------------ reward

    def _writes(self) -> list[dict]:
        return [c for c in self.calls if c["ok"] and c["name"] in WRITES]

    def _norm(self, order_id: str) -> str:
        return "#" + str(order_id).strip().lstrip("#")

    def _check_turn(self) -> int | None:
        """The turn of the first lookup of everything the decision needs (the order; for a final-sale or
        availability rule also the product)."""
        truth = self.scenario["truth"]
        orders = [c["turn"] for c in self.calls_to("get_order_details") if self._norm(c["arguments"]["order_id"]) == truth["order_id"]]
        if not orders:
            return None
        turn = min(orders)
        if truth["why"] == "final sale" or truth["kind"] == "exchange":  # the rule is about the product
            products = [c["turn"] for c in self.calls_to("get_product_details", product_id=truth["product_id"])]
            if not products:
                return None
            turn = max(turn, min(products))
        return turn

    def _forbidden(self, call: dict) -> bool:
        truth = self.scenario["truth"]
        if self._norm(call["arguments"]["order_id"]) != truth["order_id"] or call["name"] != self._wanted():
            return True  # another order, or another action, than the customer asked for
        return not truth["eligible"]

    def _wanted(self) -> str:
        return {"cancel": "cancel_pending_order", "address": "modify_pending_order_address", "return": "return_delivered_order_items",
                "exchange": "exchange_delivered_order_items"}[self.scenario["truth"]["kind"]]

    def reward(self) -> dict[str, float]:
        truth, writes = self.scenario["truth"], self._writes()
        zero = {"checked_first": 0.0, "decision": 0.0, "informed": 0.0}
        refused = any(any(w in s["text"].lower() for w in REFUSAL) for s in self.said)
        promised = any(any(w in s["text"].lower() for w in SETTLED) and not any(w in s["text"].lower() for w in REFUSAL)
                       for s in self.said)
        if any(self._forbidden(w) for w in writes) or (truth["eligible"] and refused) or (not truth["eligible"] and promised):
            return zero  # a wrong decision: collateral damage, an allowed request refused, a forbidden one promised
        check = self._check_turn()
        settled = [s["turn"] for s in self.said if any(w in s["text"].lower() for w in SETTLED)] + [w["turn"] for w in writes]
        first_settled = min(settled, default=None)
        if check is None:
            checked_first = 0.0
        elif first_settled is None:
            checked_first = 0.5  # looked it up, never decided
        else:
            checked_first = float(check < first_settled)
        after = [s for s in self.said if check is not None and s["turn"] > check]
        if truth["eligible"]:  # the decision is to act (the write's details are another capability's)
            before = check is not None and writes and check < writes[0]["turn"]
            decision = (1.0 if before else 0.25) if writes else 0.0
            confirmed = self.state["confirmed_turn"]
            informed = float(bool(writes) and confirmed is not None and confirmed < writes[0]["turn"])
        else:
            decision = float(not writes and any(any(w in s["text"].lower() for w in REFUSAL) for s in after))
            informed = float(any(truth["why"] in s["text"].lower() for s in after))
        return {"checked_first": checked_first, "decision": decision, "informed": informed}

    # ---------------------------------------------------------------- solution

    def solution(self, seed: int) -> list[dict]:
        truth = self.scenario["truth"]
        acts: list[dict] = []
        if not self.state["up_front"]:
            acts.append({"say": "I can help you with that. First, what is the email address on your account?"})
        acts.append({"tool": "find_customer_by_email", "arguments": {"email": truth["email"]}})
        ask = {"cancel": "the order id, the reason", "address": "the order id, the new address",
               "return": "the order id, which item, the payment method for the refund",
               "exchange": "the order id, which item, which variant you want instead, the payment method"}[truth["kind"]]
        if self.state["up_front"]:
            ask = ask.replace("the order id, ", "")
        acts.append({"say": f"Thanks. Please tell me {ask}."})
        acts.append({"tool": "get_order_details", "arguments": {"order_id": truth["order_id"]}})
        if truth["why"] == "final sale" or truth["kind"] == "exchange":
            acts.append({"tool": "get_product_details", "arguments": {"product_id": truth["product_id"]}})
        if not truth["eligible"]:
            return acts + [{"say": f"I'm sorry, I cannot do that: it is {truth['why']}."}]
        if truth["kind"] == "cancel":
            write = {"tool": "cancel_pending_order", "arguments": {"order_id": truth["order_id"], "reason": truth["reason"]}}
        elif truth["kind"] == "address":
            write = {"tool": "modify_pending_order_address", "arguments": {"order_id": truth["order_id"], **truth["address"]}}
        elif truth["kind"] == "return":
            write = {"tool": "return_delivered_order_items", "arguments": {
                "order_id": truth["order_id"], "item_ids": truth["item_ids"], "payment_method_id": truth["payment_method_id"]}}
        else:
            write = {"tool": "exchange_delivered_order_items", "arguments": {
                "order_id": truth["order_id"], "item_ids": truth["item_ids"], "new_item_ids": truth["new_item_ids"],
                "payment_method_id": truth["payment_method_id"]}}
        verb = write["tool"].replace("_", " ")
        return acts + [{"say": f"I will now run {verb} for this order. Shall I proceed (yes/no)?"}, write, {"say": "Done."}]
