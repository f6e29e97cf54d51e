"""Hostile env module (test fixture): prints endlessly."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class PrintFloodEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "prints endlessly."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        while True:
            print("x" * 1000)
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
