"""A tiny deterministic synthetic env (test fixture): reach the seed's target with add(n)."""

from envs.sdk import SyntheticEnv, tool


class CounterEnv(SyntheticEnv):
    capability = "arithmetic_tracking"
    description = "Reach a target number by calling add(n)."
    target = "shop"
    policy = "You are a calculator agent. Use the add tool."

    def generate(self, seed):
        return {"opening": f"Please reach {3 + seed % 5}.", "db": {"total": 0}, "truth": {"goal": 3 + seed % 5}}

    @tool
    def add(self, n: int) -> str:
        """Add n to the counter.

        Args:
            n: The number to add.
        """
        self.db["total"] += n
        return str(self.db["total"])

    def reward(self):
        goal = self.scenario["truth"]["goal"]
        return {"closeness": max(0.0, 1.0 - abs(goal - self.db["total"]) / goal)}

    def solution(self, seed):
        return [{"tool": "add", "arguments": {"n": self.scenario["truth"]["goal"]}}, {"say": "Done."}]
