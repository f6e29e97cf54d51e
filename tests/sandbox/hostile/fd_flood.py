"""Hostile env module (test fixture): writes endlessly to fd 1 and 2 at the C level."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class FdFloodEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "writes endlessly to fd 1 and 2 at the C level."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        while True:
            os.write(1, b"y" * 4096)
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
