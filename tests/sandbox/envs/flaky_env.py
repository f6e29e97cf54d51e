"""A synthetic env that hangs on seed 0 and works on every other seed (test fixture)."""

import time

from envs.sdk import SyntheticEnv, tool


class FlakyEnv(SyntheticEnv):
    capability = "flaky_behaviour"
    description = "Hangs on seed 0."
    target = "shop"
    policy = "Test env."

    def generate(self, seed):
        if seed == 0:
            time.sleep(10**6)
        return {"opening": f"seed {seed}", "db": {}}

    @tool
    def noop(self) -> str:
        """Do nothing."""
        return "ok"

    def reward(self):
        return {"fine": 1.0}

    def solution(self, seed):
        return [{"say": "done"}]
