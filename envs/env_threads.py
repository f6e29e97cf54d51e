"""Where blocking env calls run: daemon threads a caller may abandon, and which envs may run on the event loop.

An env call that never returns (a user's `step` blocked forever, a server that stopped answering) cannot be
stopped: Python threads cannot be killed. The caller stops *waiting* for it at its deadline and abandons the
thread. `concurrent.futures.ThreadPoolExecutor` is unfit for that: its worker threads are joined at interpreter
exit, so one stuck call hangs the process's shutdown. `DaemonThreads` is an `Executor` whose threads are
daemons: an idle one is reused, a busy (or stuck) one is never waited for, a new one starts when none is idle,
and an idle one ends after `idle_s`. The number of threads is bounded by the caller's own concurrency
(episodes in flight) plus the calls it abandoned.

`runs_inline(env)`: an env may declare `inline = True` (every call fast and CPU-only) to run on the event loop
without a thread hop. No deadline can fire while a call holds the loop, so the promise is honoured only for
gapforge's own built-in envs (classes in the `envs` package); a user's class always runs on a thread.
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
