"""Hostile env module (test fixture): tries to reach the network (IP, DNS, the Docker host gateway)."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class NetworkEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "tries to reach the network (IP, DNS, the Docker host gateway)."
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
        out = {}
        for host, port in (("1.1.1.1", 53), ("8.8.8.8", 443), ("172.17.0.1", 2375), ("172.17.0.1", 22)):
            try:
                socket.create_connection((host, port), timeout=1).close()
                out[f"{host}:{port}"] = "connected"
            except OSError as e:
                out[f"{host}:{port}"] = f"error: {e}"
        try:
            out["dns"] = "resolved " + socket.gethostbyname("deb.debian.org")
        except OSError as e:
            out["dns"] = f"error: {e}"
        return out

    def reward(self):
        return {"done": 0.0}

    def solution(self, seed):
        return [{"tool": "probe", "arguments": {}}]
