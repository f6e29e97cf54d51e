"""Errors of an MCP target, by boundary: load-time problems are one-line `EnvError`s (exit 2), the task file
(`TaskFileError`) or a server that does not start (`ServerStartError`, blamed on the env's code). A server failing
mid-episode is `ServerFailure`, deliberately *not* an EnvError: the policy loop records the episode's `env_error`.
"""

from __future__ import annotations

from gapforge.envs.errors import EnvError
from gapforge.faults import EnvCodeFault


class TaskFileError(EnvError):
    """The YAML task file is wrong; the message names the key and the fix."""


class ServerStartError(EnvCodeFault, EnvError):
    """The MCP server did not start or did not complete the MCP handshake."""


class ServerFailure(EnvCodeFault, RuntimeError):
    """The MCP server failed mid-episode (process gone, connection closed, no answer in time)."""


def one_line(text: str, limit: int = 300) -> str:
    """`text` squeezed onto one line (whitespace runs -> one space), its last `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else "…" + flat[-limit:]
