"""Hostile env module (test fixture): writes garbage onto every low file descriptor, hoping to hit the protocol channel."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class ChannelGarbageEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "writes garbage onto every low file descriptor, hoping to hit the protocol channel."
    target = "shop"
    policy = "Hostile test env."

    def generate(self, seed):
        for fd in range(3, 12):
            try:
                os.write(fd, b"not json at all\n")
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
