"""Recorded generator answer (attempt 1): call the shop's tools with exactly the right arguments.

Every request is allowed; what counts is precision. The customer gives the email and the order
id in the opening; the agent must pass them character for character, take item ids and the
payment method id from the tool results (never invent them), give the exact reason a cancel
needs, and report a tracking number exactly as the order shows it. Rejected calls (an unknown
email or order, item ids that are not in the order) cost reward; a write with other arguments
than the request's is a wrong write. Tools mirror the `shop` target env (names, parameters,
JSON results).
"""

from __future__ import annotations

from typing import Literal

from envs.sdk import SyntheticEnv, ToolError, tool

FIRST = ["Ava", "Liam", "Noah", "Mia", "Ethan", "Zoe", "Lucas", "Ivy", "Omar", "Sofia", "Mateo", "Chloe", "Yusuf", "Hana"]
LAST = ["Garcia", "Nguyen", "Patel", "Kim", "Rossi", "Silva", "Moreau", "Novak", "Haddad", "Larsen", "Okafor", "Tanaka"]
CATALOG = [("T-Shirt", "color", ["black", "white", "blue"]), ("Running Shoes", "size", ["8", "9", "10"]),
           ("Backpack", "color", ["green", "navy"]), ("Desk Lamp", "color", ["white", "brass"]),
           ("Water Bottle", "capacity", ["500ml", "750ml"]), ("Mechanical Keyboard", "switch", ["red", "brown"])]
KINDS = ["cancel", "return", "tracking"]
WRITES = ("cancel_pending_order", "return_delivered_order_items")
POLICY = """You are a customer-service agent for an online shop.
- Look the customer up by the exact email address they give (find_customer_by_email).
- Use ids exactly as given or as the tools return them: order ids like '#W1234567', item ids and
  payment method ids from get_order_details / get_customer_details. Never guess an id.
- A cancel needs the reason: "no longer needed" or "ordered by mistake".
- A refund goes to the order's original payment method unless the customer names a gift card.
- Before a write action, ask the customer to confirm (yes); after it, tell them the result."""


class ToolArgumentPrecisionEnv(SyntheticEnv):
    capability = "tool_argument_precision"
    description = ("Pass every tool exactly the arguments the request needs: ids copied character for character from "
                   "the customer's words or from earlier tool results, the exact enum value, nothing invented.")
    target = "shop"
    policy = POLICY
    weights = {"exact_email": 1.0, "exact_order": 1.0, "accepted_calls": 1.0, "correct_outcome": 3.0, "no_wrong_write": 1.0}
    max_turns = 16

    # ---------------------------------------------------------------- scenario

    def _customer(self, rng, first: str, last: str) -> dict:
        cid = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        card = f"credit_card_{rng.randint(10**6, 10**7 - 1)}"
        gift = f"gift_card_{rng.randint(10**6, 10**7 - 1)}"
        return {"customer_id": cid, "first_name": first, "last_name": last,
                "email": f"{first.lower()}.{last.lower()}{rng.randint(10, 99)}@example.com",
                "address": {"address1": f"{rng.randint(10, 999)} Oak Street", "address2": "", "city": "Austin",
                            "state": "TX", "country": "USA", "zip": f"{rng.randint(10000, 99999)}"},
                "payment_methods": {card: {"id": card, "source": "credit_card", "last_four": f"{rng.randint(1000, 9999)}", "balance": None},
                                    gift: {"id": gift, "source": "gift_card", "last_four": None, "balance": float(rng.randint(20, 300))}},
                "orders": []}

    def _order(self, rng, customer: dict, status: str) -> dict:
        items = []
        for name, opt, values in rng.sample(CATALOG, rng.randint(1, 3)):
            items.append({"item_id": str(rng.randint(10**9, 10**10 - 1)), "product_id": f"prod_{1001 + CATALOG.index((name, opt, values))}",
                          "name": name, "options": {opt: rng.choice(values)}, "price": round(rng.uniform(12, 140), 2)})
        card = next(p for p in customer["payment_methods"] if p.startswith("credit_card"))
        total = round(sum(i["price"] for i in items), 2)
        order = {"order_id": f"#W{rng.randint(10**6, 10**7 - 1)}", "customer_id": customer["customer_id"], "status": status,
                 "address": dict(customer["address"]), "items": items,
                 "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": card}],
                 "tracking_number": None if status == "pending" else str(rng.randint(10**11, 10**12 - 1)),
                 "cancel_reason": None, "return_items": [], "return_payment_method_id": None}
        customer["orders"].append(order["order_id"])
        return order

    def generate(self, seed: int) -> dict:
        rng = self.rng
        kind = rng.choice(KINDS)
        me = self._customer(rng, rng.choice(FIRST), rng.choice(LAST))
        status = {"cancel": "pending", "return": "delivered", "tracking": "shipped"}[kind]
        target = self._order(rng, me, status)
        others = [self._order(rng, me, s) for s in rng.sample(["pending", "delivered", "shipped"], rng.randint(1, 2))]
        truth: dict = {"kind": kind, "order_id": target["order_id"], "email": me["email"], "customer_id": me["customer_id"]}
        if kind == "cancel":
            truth["cancel_reason"] = rng.choice(["no longer needed", "ordered by mistake"])
            why = {"no longer needed": "I don't need it anymore", "ordered by mistake": "I ordered it by mistake"}[truth["cancel_reason"]]
            ask = f"I'd like to cancel my order {target['order_id']}, {why}."
        elif kind == "return":
            chosen = rng.sample(target["items"], rng.randint(1, len(target["items"])))
            to_gift = rng.random() < 0.3
            pm = next(p for p in me["payment_methods"] if p.startswith("gift_card" if to_gift else "credit_card"))
            truth.update(item_ids=sorted(i["item_id"] for i in chosen), payment_method_id=pm)
            names = " and the ".join(f"{i['name']} ({next(iter(i['options'].values()))})" for i in chosen)
            ask = (f"I want to return the {names} from order {target['order_id']}, refunded to my "
                   f"{'gift card' if to_gift else 'original payment method'}.")
        else:
            truth["tracking_number"] = target["tracking_number"]
            ask = f"My order {target['order_id']} hasn't arrived yet. What is its tracking number?"
        opening = f"Hi! {ask} My email is {me['email']}."
        self.state.update(confirmed=False, nudges=0)
        db = {"customers": {me["customer_id"]: me}, "orders": {o["order_id"]: o for o in [target, *others]}}
        return {"opening": opening, "db": db, "truth": truth}

    # ------------------------------------------------------------------- tools

    def _get_order(self, order_id: str) -> dict:
        if order_id not in self.db["orders"]:  # exact: '#W1234567', no repair of a near miss
            raise ToolError(f"order '{order_id}' not found")
        return self.db["orders"][order_id]

    @tool
    def find_customer_by_email(self, email: str) -> dict:
        """Find a customer's id by email address."""
        for c in self.db["customers"].values():
            if c["email"] == email:
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
        """Get an order: status, items (item ids, options, prices), address, payments, tracking number.

        Args:
            order_id: e.g. '#W1234567'
        """
        order = self._get_order(order_id)
        return {**order, "total": round(sum(i["price"] for i in order["items"]), 2)}

    @tool
    def cancel_pending_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> dict:
        """Cancel a pending order and refund it to the original payment method. Write action."""
        order = self._get_order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']}: only pending orders can be cancelled")
        order.update(status="cancelled", cancel_reason=reason)
        return {**order, "total": round(sum(i["price"] for i in order["items"]), 2)}

    @tool
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> dict:
        """Request a return of items of a delivered order; the refund goes to the given payment method. Write action."""
        order = self._get_order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"order {order_id} is {order['status']}: only delivered orders can be returned")
        known = {i["item_id"] for i in order["items"]}
        if not item_ids or len(set(item_ids)) != len(item_ids) or not set(item_ids) <= known:
            raise ToolError(f"item_ids must be distinct items of order {order_id}")
        owner = self.db["customers"][order["customer_id"]]
        if payment_method_id not in owner["payment_methods"]:
            raise ToolError(f"payment method '{payment_method_id}' not found")
        order.update(status="return requested", return_items=sorted(item_ids), return_payment_method_id=payment_method_id)
        refund = round(sum(i["price"] for i in order["items"] if i["item_id"] in item_ids), 2)
        return {**order, "refund_amount": refund}

    # -------------------------------------------------------- simulated user

    def user_reply(self, text: str) -> str | None:
        t, s = text.lower(), self.state
        if any(w in t for w in ("confirm", "proceed", "shall i", "should i", "go ahead")) and not self._writes():
            s["confirmed"] = True
            return "Yes, please go ahead."
        if "email" in t and "?" in t:
            return f"It's {self.scenario['truth']['email']}."
        if self._writes() or (self._order_reads() and "?" not in t):
            return None
        s["nudges"] += 1
        return None if s["nudges"] > 2 else "Could you please help me with my request?"

    # ------------------------------------------------------------------ reward

    def _writes(self) -> list[dict]:
        return [c for c in self.calls if c["ok"] and c["name"] in WRITES]

    def _order_reads(self) -> list[dict]:
        return self.calls_to("get_order_details", order_id=self.scenario["truth"]["order_id"])

    def _right_write(self, call: dict) -> float:
        """How right an accepted write is: 1 = exactly the request's arguments, 0 = another write."""
        truth, args = self.scenario["truth"], call["arguments"]
        if args.get("order_id") != truth["order_id"]:
            return 0.0
        if truth["kind"] == "cancel" and call["name"] == "cancel_pending_order":
            return 1.0 if args["reason"] == truth["cancel_reason"] else 0.5
        if truth["kind"] == "return" and call["name"] == "return_delivered_order_items":
            got, want = set(args["item_ids"]), set(truth["item_ids"])
            return 0.6 * len(got & want) / len(got | want) + 0.4 * (args["payment_method_id"] == truth["payment_method_id"])
        return 0.0

    def reward(self) -> dict[str, float]:
        truth, writes = self.scenario["truth"], self._writes()
        exact_email = self.calls_to("find_customer_by_email", email=truth["email"])
        if truth["kind"] == "tracking":
            read = min((c["turn"] for c in self._order_reads()), default=None)
            outcome = float(read is not None and any(s["turn"] > read and truth["tracking_number"] in s["text"] for s in self.said))
        else:
            outcome = max((self._right_write(w) for w in writes), default=0.0)
        return {
            "exact_email": float(bool(exact_email)),
            "exact_order": float(bool(self._order_reads())),
            "accepted_calls": sum(c["ok"] for c in self.calls) / len(self.calls) if self.calls else 0.0,
            "correct_outcome": outcome,
            "no_wrong_write": 0.0 if any(self._right_write(w) < 1.0 for w in writes) else 1.0,
        }

    # ---------------------------------------------------------------- solution

    def solution(self, seed: int) -> list[dict]:
        truth = self.scenario["truth"]
        actions: list[dict] = [{"tool": "find_customer_by_email", "arguments": {"email": truth["email"]}},
                               {"tool": "get_order_details", "arguments": {"order_id": truth["order_id"]}}]
        if truth["kind"] == "tracking":
            return actions + [{"say": f"The tracking number of your order is {truth['tracking_number']}."}]
        if truth["kind"] == "cancel":
            write = {"tool": "cancel_pending_order", "arguments": {"order_id": truth["order_id"], "reason": truth["cancel_reason"]}}
        else:
            actions.append({"tool": "get_customer_details", "arguments": {"customer_id": truth["customer_id"]}})
            write = {"tool": "return_delivered_order_items", "arguments": {
                "order_id": truth["order_id"], "item_ids": truth["item_ids"], "payment_method_id": truth["payment_method_id"]}}
        return actions + [{"say": f"I will {write['tool'].split('_')[0]} order {truth['order_id']}. Please confirm (yes/no)?"},
                          write, {"say": "Done: your request has been processed."}]
