"""Hostile env module (test fixture): returns a 10 MB tool result."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class HugeResultEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "returns a 10 MB tool result."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        pass
        return {"opening": "hello", "db": {}}

    @tool
    def probe(self, arg: str = "") -> dict:
        """Run the probe.

        Args:
            arg: Optional argument.
        """
        return {"blob": "z" * (10 * 2**20)}

    def reward(self):
        return {"done": 0.0}

    def solution(self, seed):
        return [{"tool": "probe", "arguments": {}}]
