"""Bad on purpose: the customer gives an email; the agent must look up the customer, then the
pending order, and cancel it -- but the system prompt already names the customer id and the
order id the agent has to find. Fails no_leakage, nothing else."""

from typing import Literal

from envs.sdk import SyntheticEnv, ToolError, tool

NAMES = ["Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana"]
POLICY = "You are a shop support agent. Verify the customer by email, find their pending order, then cancel it."


class LeakyCancelEnv(SyntheticEnv):
    capability = "precondition_verification"
    description = "Find the customer's pending order through the lookups before cancelling it."
    target = "shop"
    policy = POLICY

    def generate(self, seed):
        name = self.rng.choice(NAMES)
        cid = f"{name.lower()}_{self.rng.randint(1000, 9999)}"
        email = f"{name.lower()}{self.rng.randint(10, 99)}@example.com"
        orders = {}
        for status in ["pending", "delivered", "processed"][: self.rng.randint(2, 3)]:
            oid = f"#W{self.rng.randint(1000000, 9999999)}"
            orders[oid] = {"order_id": oid, "customer_id": cid, "status": status}
        pending = next(o for o, v in orders.items() if v["status"] == "pending")
        customer = {"customer_id": cid, "email": email, "orders": sorted(orders)}
        return {
            "opening": f"Hi, I am {name} ({email}). Please cancel my pending order.",
            "db": {"customers": {cid: customer}, "orders": orders},
            "truth": {"customer_id": cid, "order_id": pending},
        }

    def system_prompt(self):
        truth = self.scenario["truth"]
        return f"{POLICY}\nCustomer on the line: {truth['customer_id']}; their pending order: {truth['order_id']}."

    @tool
    def find_customer_by_email(self, email: str) -> dict:
        """Find a customer's id by email address."""
        for c in self.db["customers"].values():
            if c["email"] == email.strip().lower():
                return {"customer_id": c["customer_id"]}
        raise ToolError("customer not found")

    @tool
    def get_customer_details(self, customer_id: str) -> dict:
        """Get a customer's profile with their order ids."""
        if customer_id not in self.db["customers"]:
            raise ToolError("customer not found")
        return self.db["customers"][customer_id]

    @tool
    def get_order_details(self, order_id: str) -> dict:
        """Get an order's status."""
        if order_id not in self.db["orders"]:
            raise ToolError("order not found")
        return self.db["orders"][order_id]

    @tool
    def cancel_pending_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> dict:
        """Cancel a pending order."""
        order = self.db["orders"].get(order_id)
        if order is None or order["status"] != "pending":
            raise ToolError("only pending orders can be cancelled")
        order["status"] = "cancelled"
        return order

    def reward(self):
        truth = self.scenario["truth"]
        return {
            "found_customer": float(self.called("get_customer_details", customer_id=truth["customer_id"])),
            "checked_order": float(self.called("get_order_details", order_id=truth["order_id"])),
            "cancelled": float(self.db["orders"][truth["order_id"]]["status"] == "cancelled"),
            "informed": float(any("cancel" in s["text"].lower() for s in self.said)),
        }

    def solution(self, seed):
        truth = self.scenario["truth"]
        email = self.scenario["db"]["customers"][truth["customer_id"]]["email"]
        return [
            {"tool": "find_customer_by_email", "arguments": {"email": email}},
            {"tool": "get_customer_details", "arguments": {"customer_id": truth["customer_id"]}},
            {"tool": "get_order_details", "arguments": {"order_id": truth["order_id"]}},
            {
                "tool": "cancel_pending_order",
                "arguments": {"order_id": truth["order_id"], "reason": "no longer needed"},
            },
            {"say": f"Your order {truth['order_id']} is cancelled."},
        ]
