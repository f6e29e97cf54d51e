"""A synthetic env whose reset takes about a second (test fixture: a busy sandbox to kill from outside)."""

import time

from envs.sdk import SyntheticEnv, tool


class SlowEnv(SyntheticEnv):
    capability = "patience"
    description = "Every reset works for about a second, then counts calls."
    target = "shop"
    policy = "Test env."

    def generate(self, seed):
        time.sleep(1.0)
        return {"opening": f"seed {seed}", "db": {"calls": 0}}

    @tool
    def bump(self) -> str:
        """Count one call."""
        self.db["calls"] += 1
        return str(self.db["calls"])

    def reward(self):
        return {"calls": min(1.0, self.db["calls"] / 2)}

    def solution(self, seed):
        return [{"tool": "bump", "arguments": {}}, {"tool": "bump", "arguments": {}}]
