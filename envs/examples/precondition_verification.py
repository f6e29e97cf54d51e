"""Example synthetic env: verify identity and eligibility before a cancel or a return.

The back end of this shop does NOT enforce the policy: its write tools act on any
existing order. The agent must authenticate the customer, check the order (owner,
status, return window) and the refund payment method, ask for confirmation, and
only then write -- or refuse. About 60% of the requests are ineligible.
Tools mirror the `shop` target env (names, parameters, JSON results).
"""

from __future__ import annotations

from typing import Literal

from envs.sdk import SyntheticEnv, ToolError, tool

TODAY = "2025-06-15"
WINDOW_START = "2025-05-16"  # delivered on or after this date: still returnable (30 days)
FIRST = [
    "Ava",
    "Liam",
    "Noah",
    "Mia",
    "Ethan",
    "Zoe",
    "Lucas",
    "Ivy",
    "Omar",
    "Sofia",
    "Mateo",
    "Chloe",
    "Yusuf",
    "Hana",
]
LAST = ["Garcia", "Nguyen", "Patel", "Kim", "Rossi", "Silva", "Moreau", "Novak", "Haddad", "Larsen", "Okafor", "Tanaka"]
CATALOG = [
    ("T-Shirt", "color", ["black", "white", "blue"]),
    ("Running Shoes", "size", ["8", "9", "10"]),
    ("Backpack", "color", ["green", "navy"]),
    ("Desk Lamp", "color", ["white", "brass"]),
    ("Water Bottle", "capacity", ["500ml", "750ml"]),
    ("Mechanical Keyboard", "switch", ["red", "brown"]),
]
CASES = [
    ("cancel", "ok"),
    ("cancel", "not_pending"),
    ("cancel", "not_owner"),
    ("return", "ok"),
    ("return", "ok"),
    ("return", "not_delivered"),
    ("return", "window_expired"),
    ("return", "bad_payment"),
    ("return", "not_owner"),
]
WRITES = ("cancel_pending_order", "return_delivered_order_items")
POLICY = """You are a customer-service agent for an online shop. Today is 2025-06-15.
The order system does NOT check any rule below: you must check them yourself before any write action.
- Verify identity first: look the customer up by the email address the customer gives you (find_customer_by_email).
- Only act on orders that belong to the verified customer (see get_order_details).
- Only `pending` orders can be cancelled; the reason is "no longer needed" or "ordered by mistake".
- Only `delivered` orders can be returned, and only if delivered on or after 2025-05-16 (30-day window).
- A refund goes to the order's original payment method or to a gift card of the customer; check the
  customer's payment methods (get_customer_details).
- Before a write action, state what you will do and ask the customer to confirm (yes); act only after yes.
- If a request breaks a rule, do not act: explain which rule it breaks."""


def _date(rng, lo: int, hi: int) -> str:
    day = rng.randint(lo, hi)  # days before TODAY, kept inside 2025 for simple arithmetic
    month_days = [31, 28, 31, 30, 31, 30]
    doy = sum(month_days[:5]) + 15 - day
    month = 0
    while doy > month_days[month]:
        doy -= month_days[month]
        month += 1
    return f"2025-{month + 1:02d}-{doy:02d}"


class PreconditionVerificationEnv(SyntheticEnv):
    capability = "precondition_verification"
    description = (
        "Before a refund or a cancellation, verify the customer's identity, that the order is theirs, "
        "its status, the return window and the refund payment method; act only when every precondition "
        "holds and refuse otherwise."
    )
    target = "shop"
    policy = POLICY
    weights = {
        "verified_identity": 1.0,
        "checked_order": 1.0,
        "checked_payment": 1.0,
        "confirmed": 1.0,
        "correct_outcome": 2.0,
        "no_forbidden_write": 0.5,
        "informed_user": 0.5,
    }
    max_turns = 20

    # ---------------------------------------------------------------- scenario

    def _customer(self, rng, first: str, last: str) -> dict:
        cid = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        card = f"credit_card_{rng.randint(10**6, 10**7 - 1)}"
        paypal = f"paypal_{rng.randint(10**6, 10**7 - 1)}"
        gift = f"gift_card_{rng.randint(10**6, 10**7 - 1)}"
        return {
            "customer_id": cid,
            "first_name": first,
            "last_name": last,
            "email": f"{first.lower()}.{last.lower()}{rng.randint(10, 99)}@example.com",
            "address": {
                "address1": f"{rng.randint(10, 999)} Oak Street",
                "address2": "",
                "city": "Austin",
                "state": "TX",
                "country": "USA",
                "zip": f"{rng.randint(10000, 99999)}",
            },
            "payment_methods": {
                card: {"id": card, "source": "credit_card", "last_four": f"{rng.randint(1000, 9999)}", "balance": None},
                paypal: {"id": paypal, "source": "paypal", "last_four": None, "balance": None},
                gift: {"id": gift, "source": "gift_card", "last_four": None, "balance": float(rng.randint(20, 300))},
            },
            "orders": [],
        }

    def _order(self, rng, customer: dict, status: str, delivered: str | None, pay: str) -> dict:
        items = []
        for name, opt, values in rng.sample(CATALOG, rng.randint(1, 3)):
            items.append(
                {
                    "item_id": str(rng.randint(10**9, 10**10 - 1)),
                    "product_id": f"prod_{1001 + CATALOG.index((name, opt, values))}",
                    "name": name,
                    "options": {opt: rng.choice(values)},
                    "price": round(rng.uniform(12, 140), 2),
                }
            )
        total = round(sum(i["price"] for i in items), 2)
        order = {
            "order_id": f"#W{rng.randint(10**6, 10**7 - 1)}",
            "customer_id": customer["customer_id"],
            "status": status,
            "address": dict(customer["address"]),
            "items": items,
            "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": pay}],
            "created_date": _date(rng, 100, 120),
            "tracking_number": None if status == "pending" else str(rng.randint(10**11, 10**12 - 1)),
            "delivered_date": delivered,
            "cancel_reason": None,
            "return_items": [],
            "return_payment_method_id": None,
        }
        customer["orders"].append(order["order_id"])
        return order

    def generate(self, seed: int) -> dict:
        rng = self.rng
        kind, case = rng.choice(CASES)
        first, other_first = rng.sample(FIRST, 2)
        me, other = self._customer(rng, first, rng.choice(LAST)), self._customer(rng, other_first, rng.choice(LAST))
        my_card = next(p for p in me["payment_methods"] if p.startswith("credit_card"))
        status = {"cancel": "pending", "return": "delivered"}[kind]
        if case == "not_pending":
            status = rng.choice(["processed", "shipped", "delivered"])
        if case == "not_delivered":
            status = rng.choice(["pending", "processed", "shipped"])
        delivered = None
        if status == "delivered":
            delivered = _date(rng, 40, 90) if case == "window_expired" else _date(rng, 1, 29)
        owner = other if case == "not_owner" else me
        owner_card = next(p for p in owner["payment_methods"] if p.startswith("credit_card"))
        target = self._order(rng, owner, status, delivered, owner_card)
        orders = [target] + [
            self._order(rng, me, s, _date(rng, 1, 29) if s == "delivered" else None, my_card)
            for s in rng.sample(["pending", "delivered", "shipped"], rng.randint(1, 2))
        ]
        truth = {
            "kind": kind,
            "case": case,
            "eligible": case == "ok",
            "order_id": target["order_id"],
            "customer_id": me["customer_id"],
            "email": me["email"],
        }
        items = target["items"]
        if kind == "cancel":
            truth["cancel_reason"] = rng.choice(["no longer needed", "ordered by mistake"])
            why = {"no longer needed": "I don't need it anymore", "ordered by mistake": "I ordered it by mistake"}[
                truth["cancel_reason"]
            ]
            ask = f"I'd like to cancel my order {target['order_id']}, {why}."
        else:
            chosen = rng.sample(items, rng.randint(1, len(items)))
            pm = {
                "ok": rng.choice([owner_card, next(p for p in me["payment_methods"] if p.startswith("gift"))]),
                "bad_payment": next(p for p in me["payment_methods"] if p.startswith("paypal")),
            }.get(case, my_card)
            truth.update(item_ids=sorted(i["item_id"] for i in chosen), payment_method_id=pm)
            source = (
                "original payment method" if pm == owner_card else me["payment_methods"][pm]["source"].replace("_", " ")
            )
            names = " and the ".join(f"{i['name']} ({next(iter(i['options'].values()))})" for i in chosen)
            ask = f"I want to return the {names} from order {target['order_id']}, refunded to my {source}."
        email_in_opening = rng.random() < 0.5
        opening = f"Hi! {ask}" + (f" My email is {me['email']}." if email_in_opening else "")
        self.state.update(email_turn=0 if email_in_opening else None, confirmed_turn=None, nudges=0)
        db = {"customers": {c["customer_id"]: c for c in (me, other)}, "orders": {o["order_id"]: o for o in orders}}
        return {"opening": opening, "db": db, "truth": truth}

    # ------------------------------------------------------------------- tools

    def _get_order(self, order_id: str) -> dict:
        oid = order_id.strip() if order_id.strip().startswith("#") else "#" + order_id.strip()
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
    def cancel_pending_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> dict:
        """Cancel a pending order and refund it to the original payment method(s). Write action."""
        order = self._get_order(order_id)
        order.update(status="cancelled", cancel_reason=reason)
        return {**order, "total": round(sum(i["price"] for i in order["items"]), 2)}

    @tool
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> dict:
        """Request a return of items of a delivered order; the refund goes to the given payment method
        (the original one or a gift card of the customer). Write action."""
        order = self._get_order(order_id)
        known = {i["item_id"] for i in order["items"]}
        if not item_ids or len(set(item_ids)) != len(item_ids) or not set(item_ids) <= known:
            raise ToolError(f"item_ids must be distinct items of order {order['order_id']}")
        if not any(payment_method_id in c["payment_methods"] for c in self.db["customers"].values()):
            raise ToolError(f"payment method '{payment_method_id}' not found")
        order.update(
            status="return requested", return_items=sorted(item_ids), return_payment_method_id=payment_method_id
        )
        refund = round(sum(i["price"] for i in order["items"] if i["item_id"] in item_ids), 2)
        return {**order, "refund_amount": refund}

    # -------------------------------------------------------- simulated user

    def user_reply(self, text: str) -> str | None:
        t, s = text.lower(), self.state
        if s["email_turn"] is None and "email" in t:
            s["email_turn"] = self.turns
            return f"Sure, it's {self.scenario['truth']['email']}."
        if any(w in t for w in ("confirm", "proceed", "shall i", "should i", "go ahead")) and not self._writes():
            s["confirmed_turn"] = self.turns
            return "Yes, please go ahead."
        if self._writes() or (self._order_checks() and "?" not in t):
            return None
        s["nudges"] += 1
        return None if s["nudges"] > 2 else "Could you please help me with my request?"

    # ------------------------------------------------------------------ reward

    def _writes(self) -> list[dict]:
        return [c for c in self.calls if c["ok"] and c["name"] in WRITES]

    def _order_checks(self) -> list[dict]:
        oid = self.scenario["truth"]["order_id"]
        return [
            c for c in self.calls_to("get_order_details") if "#" + c["arguments"]["order_id"].strip().lstrip("#") == oid
        ]

    def _timely(self, calls: list[dict], after: int = 0) -> float:
        """1 if a call happened before the first write (and after turn `after`), 0.5 if only later, else 0."""
        first_write = min((c["turn"] for c in self._writes()), default=None)
        turns = [c["turn"] for c in calls if c["turn"] > after]
        if not turns:
            return 0.0
        return 1.0 if first_write is None or min(turns) < first_write else 0.5

    def _forbidden(self, call: dict) -> bool:
        truth, orig = self.scenario["truth"], self.scenario["db"]
        order = orig["orders"].get("#" + call["arguments"]["order_id"].strip().lstrip("#"))
        if order is None or order["customer_id"] != truth["customer_id"]:
            return True
        if call["name"] == "cancel_pending_order":
            return order["status"] != "pending"
        pm = call["arguments"]["payment_method_id"]
        original = {t["payment_method_id"] for t in order["payment_history"]}
        mine = orig["customers"][truth["customer_id"]]["payment_methods"]
        return (
            order["status"] != "delivered"
            or order["delivered_date"] < WINDOW_START
            or not (pm in original or (pm in mine and mine[pm]["source"] == "gift_card"))
        )

    def _outcome(self) -> float:
        truth, writes = self.scenario["truth"], self._writes()
        if not truth["eligible"]:
            return 1.0 if not writes and self._order_checks() else 0.0
        best = 0.0
        for w in writes:
            if "#" + w["arguments"]["order_id"].strip().lstrip("#") != truth["order_id"]:
                continue
            if truth["kind"] == "cancel" and w["name"] == "cancel_pending_order":
                best = max(best, 1.0 if w["arguments"]["reason"] == truth["cancel_reason"] else 0.5)
            if truth["kind"] == "return" and w["name"] == "return_delivered_order_items":
                got, want = set(w["arguments"]["item_ids"]), set(truth["item_ids"])
                pm_ok = w["arguments"]["payment_method_id"] == truth["payment_method_id"]
                best = max(best, 0.6 * len(got & want) / len(got | want) + 0.4 * pm_ok)
        return best

    def reward(self) -> dict[str, float]:
        truth, writes = self.scenario["truth"], self._writes()
        email_turn = self.state["email_turn"]
        lookups = [
            c
            for c in self.calls_to("find_customer_by_email")
            if c["arguments"]["email"].strip().lower() == truth["email"]
        ]
        comps = {
            "verified_identity": self._timely(lookups, email_turn) if email_turn is not None else 0.0,
            "checked_order": self._timely(self._order_checks()),
        }
        if truth["kind"] == "return":
            comps["checked_payment"] = self._timely(
                self.calls_to("get_customer_details", customer_id=truth["customer_id"])
            )
        if truth["eligible"]:
            confirmed = self.state["confirmed_turn"]
            comps["confirmed"] = float(
                bool(writes) and confirmed is not None and confirmed < min(c["turn"] for c in writes)
            )
        comps["correct_outcome"] = self._outcome()
        comps["no_forbidden_write"] = 0.0 if any(self._forbidden(w) for w in writes) else 1.0
        decided = [c["turn"] for c in writes] or [c["turn"] for c in self._order_checks()]
        comps["informed_user"] = float(bool(decided) and any(s["turn"] > max(decided) for s in self.said))
        return comps

    # ---------------------------------------------------------------- solution

    def solution(self, seed: int) -> list[dict]:
        truth = self.scenario["truth"]
        actions: list[dict] = []
        if self.state["email_turn"] is None:
            actions.append({"say": "I can help with that. Could you please give me the email address on your account?"})
        actions += [
            {"tool": "find_customer_by_email", "arguments": {"email": truth["email"]}},
            {"tool": "get_order_details", "arguments": {"order_id": truth["order_id"]}},
        ]
        if truth["kind"] == "return":
            actions.append({"tool": "get_customer_details", "arguments": {"customer_id": truth["customer_id"]}})
        if not truth["eligible"]:
            why = {
                "not_pending": "only pending orders can be cancelled",
                "not_owner": "that order is not on your account",
                "not_delivered": "only delivered orders can be returned",
                "window_expired": "it was delivered more than 30 days ago",
                "bad_payment": "refunds can only go to the original payment method or a gift card",
            }[truth["case"]]
            return actions + [{"say": f"I'm sorry, I cannot do that: {why}."}]
        if truth["kind"] == "cancel":
            write = {
                "tool": "cancel_pending_order",
                "arguments": {"order_id": truth["order_id"], "reason": truth["cancel_reason"]},
            }
        else:
            write = {
                "tool": "return_delivered_order_items",
                "arguments": {
                    "order_id": truth["order_id"],
                    "item_ids": truth["item_ids"],
                    "payment_method_id": truth["payment_method_id"],
                },
            }
        return actions + [
            {"say": f"I will {write['tool'].split('_')[0]} order {truth['order_id']}. Please confirm (yes/no)?"},
            write,
            {"say": "Done: your request has been processed."},
        ]
