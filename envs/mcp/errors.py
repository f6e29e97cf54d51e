"""Errors of an MCP target, by boundary.

Load-time problems are `EnvError`s (user-fixable, one line, exit 2 from the CLI):
the task file (`TaskFileError`, bad input) and a server that does not start
(`ServerStartError`, with the tail of its stderr: blamed on the env's code, `EnvCodeFault`).
A server failing during an episode (it died, its pipe closed, it stopped answering) is
`ServerFailure`, the env's code too and deliberately *not* an EnvError: the policy loop
records it as the episode's `env_error`, with the server's last stderr words.
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
