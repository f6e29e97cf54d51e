"""Hostile env module (test fixture): allocates memory without bound."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class MemoryHogEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "allocates memory without bound."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        hoard = []
        while True:
            hoard.append(bytearray(8 * 2**20))
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
