"""Hostile env module (test fixture): forks without bound."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class ForkBombEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "forks without bound."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        while True:
            try:
                os.fork()
            except OSError:
                pass
        return {"opening": "hello", "db": {}}

    @tool
    def probe(self, arg: str = "") -> dict:
        """Run the probe.

        Args:
            arg: Optional argument.
        """
        return {}

    def reward(self):
        return {"done": 0.0}

    def solution(self, seed):
        return [{"tool": "probe", "arguments": {}}]
