"""Hostile env module (test fixture): spins forever."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class SpinEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "spins forever."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        while True:
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
