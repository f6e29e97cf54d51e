"""Broken on purpose: tools() advertises get_order_details with parameters of type
'array' instead of an object. Fails: loads.
"""

from typing import Literal

from envs.sdk import SyntheticEnv, ToolError, tool

STATUSES = ["pending", "delivered", "processed"]
# What the self-test must report (read by tests/sandbox/test_checks*.py).
EXPECTED_FAILURES = {"loads"}
VALIDATE_TARGET = "shop"


class CancelCheckEnv(SyntheticEnv):
    capability = "precondition_verification"
    description = "Check an order's status before cancelling it; only pending orders may be cancelled."
    target = "shop"
    policy = "You are a shop support agent. Only pending orders can be cancelled. Look the order up first."

    def generate(self, seed):
        orders = {}
        for _ in range(self.rng.randint(3, 5)):
            oid = f"#W{self.rng.randint(1000000, 9999999)}"
            orders[oid] = {
                "order_id": oid,
                "status": self.rng.choice(STATUSES),
                "total": round(self.rng.uniform(5, 500), 2),
            }
        target = self.rng.choice(sorted(orders))
        name = self.rng.choice(["Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana"])
        return {
            "opening": f"Hi, I am {name}. Please cancel my order {target}, I no longer need it.",
            "db": {"orders": orders},
            "truth": {"order_id": target, "cancellable": orders[target]["status"] == "pending"},
        }

    @tool
    def get_order_details(self, order_id: str) -> dict:
        """Get an order's status and total.

        Args:
            order_id: The order id, such as '#W1234567'.
        """
        if order_id not in self.db["orders"]:
            raise ToolError("order not found")
        return self.db["orders"][order_id]

    @tool
    def cancel_pending_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> dict:
        """Cancel an order.

        Args:
            order_id: The order id.
            reason: Why the customer cancels.
        """
        if order_id not in self.db["orders"]:
            raise ToolError("order not found")
        self.db["orders"][order_id]["status"] = "cancelled"
        return self.db["orders"][order_id]

    def tools(self):
        schemas = super().tools()
        schemas[0]["function"]["parameters"] = {"type": "array", "items": {"type": "string"}}  # BUG
        return schemas

    def reward(self):
        truth = self.scenario["truth"]
        oid = truth["order_id"]
        looked = self.called("get_order_details", order_id=oid)
        cancelled = self.db["orders"][oid]["status"] == "cancelled"
        status = self.scenario["db"]["orders"][oid]["status"]
        told = any(status in s["text"] for s in self.said)
        return {
            "looked_up": float(looked),
            "right_action": float(looked and cancelled == truth["cancellable"]),
            "informed": float(told),
        }

    def solution(self, seed):
        oid = self.scenario["truth"]["order_id"]
        status = self.scenario["db"]["orders"][oid]["status"]
        actions = [{"tool": "get_order_details", "arguments": {"order_id": oid}}]
        if self.scenario["truth"]["cancellable"]:
            actions.append(
                {"tool": "cancel_pending_order", "arguments": {"order_id": oid, "reason": "no longer needed"}}
            )
        actions.append({"say": f"Your order {oid} was {status}."})
        return actions
