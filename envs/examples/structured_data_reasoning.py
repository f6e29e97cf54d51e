"""Example synthetic env: act on and answer from facts buried in nested JSON order records.

A customer has 3-5 orders with nested items (options, prices) in various statuses.
Requests: (a) return every item with a given option value from the delivered
orders, to the customer's gift card, and state the refund total; (b) list the
item ids of all non-cancelled items with a given option value and their total
price. Partial credit per correct item. Tools mirror the `shop` target env.
"""

from __future__ import annotations

import re

from envs.sdk import SyntheticEnv, ToolError, tool

FIRST = "Ava Liam Noah Mia Ethan Zoe Lucas Ivy Omar Sofia Mateo Chloe Yusuf Hana".split()
LAST = "Garcia Nguyen Patel Kim Rossi Silva Moreau Novak Haddad Larsen Okafor Tanaka".split()
PRODUCTS = [
    ("T-Shirt", {"size": ["S", "M", "L"]}),
    ("Running Shoes", {"size": ["8", "9", "10"]}),
    ("Backpack", {"material": ["nylon", "leather"]}),
    ("Desk Lamp", {"finish": ["matte", "glossy"]}),
    ("Hoodie", {"size": ["S", "M", "L"]}),
    ("Water Bottle", {"material": ["steel", "glass"]}),
    ("Headphones", {"finish": ["matte", "glossy"]}),
    ("Jacket", {"material": ["nylon", "leather"]}),
]
COLORS = ["black", "white", "blue", "red", "green"]
STATUSES = ["delivered", "delivered", "pending", "shipped", "cancelled", "processed"]
POLICY = """You are a customer-service agent for an online shop. Today is 2025-06-15.
- Verify identity first with find_customer_by_email.
- Order ids are listed in the customer's profile (get_customer_details); read every relevant order with
  get_order_details before answering: item options (such as color) are inside each item's "options".
- Returns: only `delivered` orders; one return request per order, listing all its items to return;
  the customer's message describing the return is their confirmation.
- Give prices and amounts with two decimals, e.g. 54.30, and end your answer with the total."""
_AMOUNT = re.compile(r"\d+\.\d{2}")
_ITEM_ID = re.compile(r"\b\d{10}\b")


class StructuredDataReasoningEnv(SyntheticEnv):
    capability = "structured_data_reasoning"
    description = (
        "Find, filter and aggregate facts buried in nested JSON records returned by tools (orders -> items "
        "-> options, statuses, prices) across several records, and act on or report exactly the matching ones."
    )
    target = "shop"
    policy = POLICY
    weights = {"gathered": 1.0, "item_credit": 3.0, "payment_ok": 1.0, "reported_total": 1.0}
    max_turns = 24

    def generate(self, seed: int) -> dict:
        rng = self.rng
        kind = rng.choice(["return_matching", "list_matching"])
        first, last = rng.choice(FIRST), rng.choice(LAST)
        cid = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        card, gift = f"credit_card_{rng.randint(10**6, 10**7 - 1)}", f"gift_card_{rng.randint(10**6, 10**7 - 1)}"
        customer = {
            "customer_id": cid,
            "first_name": first,
            "last_name": last,
            "email": f"{first.lower()}.{last.lower()}{rng.randint(10, 99)}@example.com",
            "address": {
                "address1": f"{rng.randint(10, 999)} Maple Avenue",
                "address2": "",
                "city": "Denver",
                "state": "CO",
                "country": "USA",
                "zip": f"{rng.randint(10000, 99999)}",
            },
            "payment_methods": {
                card: {"id": card, "source": "credit_card", "last_four": f"{rng.randint(1000, 9999)}", "balance": None},
                gift: {"id": gift, "source": "gift_card", "last_four": None, "balance": float(rng.randint(20, 300))},
            },
            "orders": [],
        }
        color = rng.choice(COLORS)
        statuses = rng.sample(STATUSES, rng.randint(3, 5))
        # guarantee a match where the request can act on it, and a distractor where it cannot
        wanted = "delivered" if kind == "return_matching" else rng.choice(["delivered", "pending", "shipped"])
        excluded = rng.choice(["pending", "shipped", "processed"]) if kind == "return_matching" else "cancelled"
        statuses = [wanted, excluded] + [s for s in statuses if s not in (wanted, excluded)][:3]
        rng.shuffle(statuses)
        orders = {}
        for _n, status in enumerate(statuses):
            items = []
            for name, opts in rng.sample(PRODUCTS, rng.randint(2, 4)):
                key = next(iter(opts))
                c = color if (status in (wanted, excluded) and not items) else rng.choice(COLORS)
                items.append(
                    {
                        "item_id": str(rng.randint(10**9, 10**10 - 1)),
                        "product_id": f"prod_{1001 + PRODUCTS.index((name, opts))}",
                        "name": name,
                        "options": {"color": c, key: rng.choice(opts[key])},
                        "price": round(rng.uniform(9, 160), 2),
                    }
                )
            rng.shuffle(items)
            oid = f"#W{rng.randint(10**6, 10**7 - 1)}"
            total = round(sum(i["price"] for i in items), 2)
            orders[oid] = {
                "order_id": oid,
                "customer_id": cid,
                "status": status,
                "address": dict(customer["address"]),
                "items": items,
                "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": card}],
                "created_date": f"2025-0{rng.randint(2, 5)}-{rng.randint(10, 28)}",
                "tracking_number": None,
                "delivered_date": f"2025-06-{rng.randint(1, 14):02d}" if status == "delivered" else None,
                "cancel_reason": None,
                "return_items": [],
                "return_payment_method_id": None,
            }
            customer["orders"].append(oid)
        if kind == "return_matching":
            keep = lambda o: o["status"] == "delivered"  # noqa: E731
            ask = (
                f"Please return every {color} item from my delivered orders and refund it all to my gift card. "
                "How much will I get back?"
            )
        else:
            keep = lambda o: o["status"] != "cancelled"  # noqa: E731
            ask = (
                f"Which of the items in my orders are {color}? Skip cancelled orders. "
                "Give me their item ids and their total price."
            )
        matches = [
            (o["order_id"], i["item_id"], i["price"])
            for o in orders.values()
            if keep(o)
            for i in o["items"]
            if i["options"]["color"] == color
        ]
        truth = {
            "kind": kind,
            "color": color,
            "customer_id": cid,
            "email": customer["email"],
            "gift_card": gift,
            "matches": [[o, i] for o, i, _ in matches],
            "total": round(sum(p for _, _, p in matches), 2),
        }
        self.state["nudges"] = 0
        return {
            "opening": f"Hi, my email is {customer['email']}. {ask}",
            "db": {"customers": {cid: customer}, "orders": orders},
            "truth": truth,
        }

    def _get_order(self, order_id: str) -> dict:
        oid = "#" + order_id.strip().lstrip("#")
        if oid not in self.db["orders"]:
            raise ToolError(f"order '{order_id}' not found")
        return self.db["orders"][oid]

    @tool
    def find_customer_by_email(self, email: str) -> dict:
        """Find a customer's id by email address. Verifies the customer's identity."""
        for c in self.db["customers"].values():
            if c["email"].lower() == email.strip().lower():
                return {"customer_id": c["customer_id"]}
        raise ToolError("customer not found")

    @tool
    def get_customer_details(self, customer_id: str) -> dict:
        """Get a customer's profile: name, email, address, payment methods (with gift card balances), order ids."""
        if customer_id not in self.db["customers"]:
            raise ToolError(f"customer '{customer_id}' not found")
        return self.db["customers"][customer_id]

    @tool
    def get_order_details(self, order_id: str) -> dict:
        """Get an order: status, items (item ids, options, prices), address, payments, tracking, dates.

        Args:
            order_id: e.g. '#W1234567'
        """
        order = self._get_order(order_id)
        return {**order, "total": round(sum(i["price"] for i in order["items"]), 2)}

    @tool
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> dict:
        """Request a return of items of a delivered order; the refund goes to the given payment method
        (the original one or a gift card of the customer). Write action."""
        order = self._get_order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"order {order['order_id']} is '{order['status']}': only delivered orders can be returned")
        known = {i["item_id"] for i in order["items"]}
        if not item_ids or len(set(item_ids)) != len(item_ids) or not set(item_ids) <= known:
            raise ToolError(f"item_ids must be distinct items of order {order['order_id']}")
        pms = self.db["customers"][order["customer_id"]]["payment_methods"]
        if payment_method_id not in pms:
            raise ToolError(f"payment method '{payment_method_id}' not found for this customer")
        order.update(
            status="return requested", return_items=sorted(item_ids), return_payment_method_id=payment_method_id
        )
        refund = round(sum(i["price"] for i in order["items"] if i["item_id"] in item_ids), 2)
        return {**order, "refund_amount": refund}

    def user_reply(self, text: str) -> str | None:
        if _AMOUNT.search(text) or self.called("return_delivered_order_items"):
            return None  # the agent answered: the customer is done
        self.state["nudges"] += 1
        return None if self.state["nudges"] > 2 else "Could you check my orders and tell me, please?"

    def reward(self) -> dict[str, float]:
        truth = self.scenario["truth"]
        needed = [
            ("find_customer_by_email", {"email": truth["email"]}),
            ("get_customer_details", {"customer_id": truth["customer_id"]}),
        ]
        needed += [("get_order_details", {"order_id": oid}) for oid in self.scenario["db"]["orders"]]
        done = sum(
            any(c["name"] == name and _same(c["arguments"], args) for c in self.calls if c["ok"])
            for name, args in needed
        )
        want = {tuple(m) for m in truth["matches"]}
        last_text = self.said[-1]["text"] if self.said else ""
        amounts = _AMOUNT.findall(last_text)
        comps = {
            "gathered": done / len(needed),
            "reported_total": float(bool(amounts) and abs(float(amounts[-1]) - truth["total"]) < 0.005),
        }
        if truth["kind"] == "return_matching":
            returns = self.calls_to("return_delivered_order_items")
            got = {
                ("#" + c["arguments"]["order_id"].lstrip("#"), i) for c in returns for i in c["arguments"]["item_ids"]
            }
            comps["payment_ok"] = (
                sum(c["arguments"]["payment_method_id"] == truth["gift_card"] for c in returns) / len(returns)
                if returns
                else 0.0
            )
        else:
            mentioned = set(_ITEM_ID.findall(" ".join(s["text"] for s in self.said)))
            got = {(o, i) for o, i in want if i in mentioned}
            got |= {("?", i) for i in mentioned - {i for _, i in want}}
        comps["item_credit"] = len(got & want) / (len(want) + len(got - want))
        return comps

    def solution(self, seed: int) -> list[dict]:
        truth, orders = self.scenario["truth"], self.scenario["db"]["orders"]
        actions = [
            {"tool": "find_customer_by_email", "arguments": {"email": truth["email"]}},
            {"tool": "get_customer_details", "arguments": {"customer_id": truth["customer_id"]}},
        ]
        actions += [{"tool": "get_order_details", "arguments": {"order_id": oid}} for oid in orders]
        if truth["kind"] == "return_matching":
            for oid in orders:
                ids = [i for o, i in truth["matches"] if o == oid]
                if ids:
                    actions.append(
                        {
                            "tool": "return_delivered_order_items",
                            "arguments": {"order_id": oid, "item_ids": ids, "payment_method_id": truth["gift_card"]},
                        }
                    )
            return actions + [
                {"say": f"The returns are requested. Your gift card will be refunded {truth['total']:.2f}."}
            ]
        ids = ", ".join(i for _, i in truth["matches"])
        return actions + [
            {"say": f"Your {truth['color']} items are: {ids}. Their total price is {truth['total']:.2f}."}
        ]


def _same(got: dict, want: dict) -> bool:
    norm = lambda v: v.strip().lower().lstrip("#") if isinstance(v, str) else v  # noqa: E731
    return all(norm(got.get(k)) == norm(v) for k, v in want.items())
