"""Hostile env module (test fixture): kills its own interpreter with os._exit."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class HardExitEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "kills its own interpreter with os._exit."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        os._exit(3)
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
