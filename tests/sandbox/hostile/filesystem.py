"""Hostile env module (test fixture): writes outside /tmp and reads host files; arg = host paths to try, ':'-separated."""

import os
import socket
import sys
import time

from envs.sdk import SyntheticEnv, tool


class FilesystemEnv(SyntheticEnv):
    capability = "hostile_probe"
    description = "writes outside /tmp and reads host files; arg = host paths to try, ':'-separated."
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
        for path in ("/etc/gapforge_pwned", "/opt/gapforge/pwned", "/opt/gapforge/server.py", "/pwned", "/var/tmp/pwned", "/tmp/ok"):
            try:
                with open(path, "a") as f:
                    f.write("pwned")
                out["write " + path] = "written"
            except OSError as e:
                out["write " + path] = f"error: {e}"
        for path in ["/etc/shadow", "/root", "/var/run/docker.sock", "/run/docker.sock"] + [p for p in arg.split(":") if p]:
            try:
                if os.path.isdir(path):
                    out["read " + path] = "listed " + ",".join(os.listdir(path))
                else:
                    with open(path, "rb") as f:
                        out["read " + path] = "read %d bytes" % len(f.read())
            except OSError as e:
                out["read " + path] = f"error: {e}"
        return out

    def reward(self):
        return {"done": 0.0}

    def solution(self, seed):
        return [{"tool": "probe", "arguments": {}}]
