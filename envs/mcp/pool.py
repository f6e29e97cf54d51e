"""Process-wide bookkeeping of MCP servers: idle connections kept for reuse, and one lock per URL server.

Starting a stdio server costs a process and the SDK's import (~0.5 s for a Python server) and the rollout collector
builds one env per episode: for a target reset by its reset tool, a closed env parks its healthy connection here and
the next env of the same server (argv, cwd, env, url) takes it; the reset tool runs at every `reset`, so the reuse is
invisible. `reset.mode: restart` targets never park. At most `MAX_IDLE` wait per server; `close_idle()` ends them
(at interpreter exit). A URL server is one server for all env instances: `url_lock(url)` lets one env hold it from
its first `reset` to its `close()`.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from gapforge.envs.mcp.client import Connection

MAX_IDLE = 8

_lock = threading.Lock()
_idle: dict[tuple[Any, ...], list[Connection]] = {}
_url_locks: dict[str, threading.Lock] = {}


def take(key: tuple[Any, ...]) -> Connection | None:
    """An idle live connection to this server, or None (dead ones found on the way are closed)."""
    dead: list[Connection] = []
    found: Connection | None = None
    with _lock:
        waiting = _idle.get(key, [])
        while waiting and found is None:
            conn = waiting.pop()
            if conn.alive:
                found = conn
            else:
                dead.append(conn)
    for conn in dead:
        conn.close()
    return found


def park(key: tuple[Any, ...], conn: Connection) -> None:
    """Keep a healthy connection for the next env of this server; close it when it is not healthy, when a call on
    it has not returned (an episode abandoned it at its time limit: the next episode's reset would race its
    write), or when MAX_IDLE wait."""
    if conn.alive and not conn.in_flight:
        with _lock:
            waiting = _idle.setdefault(key, [])
            if len(waiting) < MAX_IDLE:
                waiting.append(conn)
                return
    conn.close()


def idle_count(key: tuple[Any, ...] | None = None) -> int:
    with _lock:
        return sum(len(v) for k, v in _idle.items() if key is None or k == key)


def close_idle() -> int:
    """Close every parked connection; returns how many."""
    with _lock:
        conns = [c for waiting in _idle.values() for c in waiting]
        _idle.clear()
    for conn in conns:
        conn.close()
    return len(conns)


def url_lock(url: str) -> threading.Lock:
    with _lock:
        return _url_locks.setdefault(url, threading.Lock())


atexit.register(close_idle)
