"""Where blocking env calls run: daemon threads a caller may abandon, and which envs may run on the event loop.

A stuck env call (a user's `step` blocked forever, a silent server) cannot be stopped, Python threads cannot be
killed: the caller stops *waiting* at its deadline and abandons the thread. `ThreadPoolExecutor` joins its workers at
exit, so one stuck call hangs shutdown; `DaemonThreads` is an `Executor` on daemon threads: an idle one is reused, a
busy one never waited for, a new one started when none is idle, an idle one ends after `idle_s`.

`runs_inline(env)`: `inline = True` (every call fast and CPU-only: run on the event loop, no thread hop) is honoured
only for gapforge's own built-in envs (classes in the `envs` package): no deadline can fire while a call holds the loop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

BUILTIN_PACKAGE = __name__.rpartition(".")[0]  # this package (gapforge.envs): its envs are the built-in ones


def runs_inline(env: Any) -> bool:
    """True when `env` declares `inline = True` and its class is one of gapforge's built-in envs."""
    if getattr(env, "inline", False) is not True:
        return False
    module = type(env).__module__ or ""
    return module == BUILTIN_PACKAGE or module.startswith(BUILTIN_PACKAGE + ".")


def boundary_of(env: Any) -> str:
    """Who answers an env call: 'sandbox' for an env served from the Docker sandbox, else 'env' (the env's own code,
    which for an MCP target includes its server)."""
    return "sandbox" if (type(env).__module__ or "").startswith("gapforge.sandbox.") else "env"


_STOP = object()


class DaemonThreads(Executor):
    """An Executor on daemon threads: reused while idle, never joined (module docstring)."""

    def __init__(self, name: str = "env", idle_s: float = 30.0) -> None:
        self.name, self.idle_s = name, idle_s
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for work and not yet promised to a submitted call
        self._started = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name} threads are shut down: no new env call can start")
            self._work.put((future, fn, args, kwargs))
            if self._idle > 0:
                self._idle -= 1
                return future
            self._started += 1
            index = self._started
        threading.Thread(target=self._serve, name=f"{self.name}-{index}", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                item = self._work.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._work.empty():  # nothing promised to this thread: it ends
                        self._idle -= 1
                        return
                continue
            if item is _STOP:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - the caller gets the call's exception
                    future.set_exception(e)
            del item, future, fn, args, kwargs
            with self._lock:
                if self._closed:
                    return
                self._idle += 1

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = False) -> None:
        """Idle threads end now; a call still running is not waited for (whatever `wait` says: it may never return)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    item[0].cancel()
        for _ in range(idle):
            self._work.put(_STOP)
