"""Admission of chat requests to the model: a bounded queue, a time limit per request, and draining.

`Admission` counts the chat requests the server holds (being decoded or waiting for the model). One
past `max_queue` is refused at once (`enter()` is False: the server answers 429 with `retry_after()`),
so an overloaded server answers quickly instead of letting every caller time out. `run(work)` awaits
one admitted request's work and ends it early in three ways, each of which cancels the work's task
(the local backend then drops the request's row from its batch: serving/batching.py):

- past `request_timeout_s` -> `RequestTimedOut` (the server answers 504);
- `cut()` (shutdown: the drain timeout passed, or a second signal) -> `ServerStopping` (503);
- the caller's own task cancelled (aiohttp cancels a handler whose client disconnected) -> counted
  in `counts["disconnected"]`, the CancelledError goes on.

`drain()` marks the server as stopping (new requests get 503 from the server's guard);
`wait_idle(timeout)` waits until every admitted request has left.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gapforge.faults import EndpointFault

T = TypeVar("T")
CANCEL_WAIT_S = 1.0  # how long an ended request's work may take to honour its cancellation


class RequestTimedOut(EndpointFault):
    """The request's work ran past request_timeout_s (504)."""


class ServerStopping(EndpointFault):
    """The server stopped before the request's answer (503)."""


class Admission:
    def __init__(
        self, max_queue: int, request_timeout_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        self.max_queue = max_queue
        self.request_timeout_s = request_timeout_s
        self.clock = clock
        self.in_flight = 0
        self.draining = False
        # admitted, answered, rejected, timed_out, disconnected, cut, refused_draining
        self.counts: Counter[str] = Counter()
        self.mean_s: float | None = None  # moving mean of answered requests' time in the server (queueing included)
        self._stop, self._idle = asyncio.Event(), asyncio.Event()
        self._idle.set()

    def enter(self) -> bool:
        """Admit one request, or False when `max_queue` are held already (the caller answers 429)."""
        if self.in_flight >= self.max_queue:
            self.counts["rejected"] += 1
            return False
        self.in_flight += 1
        self.counts["admitted"] += 1
        self._idle.clear()
        return True

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the recent mean answer time, rounded up, within 1-60 s
        (the openai client honours a Retry-After of up to 60 s)."""
        return min(60, max(1, math.ceil(self.mean_s or 1.0)))

    async def run(self, work: Awaitable[T]) -> T:
        """Await an admitted request's work within the time limit; whenever it ends early its task is cancelled and
        awaited (up to CANCEL_WAIT_S), so the generation it waited for has been told to stop when this returns."""
        start = self.clock()
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            done, _ = await asyncio.wait(
                {task, stop}, timeout=self.request_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            self.counts["disconnected"] += 1
            await _cancel(task)
            raise
        finally:
            stop.cancel()
        if task in done:
            result = task.result()  # the work's own error goes to the caller
            self._answered(self.clock() - start)
            return result
        await _cancel(task)
        if stop in done:
            self.counts["cut"] += 1
            raise ServerStopping("the server stopped before this request's answer")
        self.counts["timed_out"] += 1
        raise RequestTimedOut(f"no answer within serving.request_timeout_s={self.request_timeout_s:g} s")

    def _answered(self, seconds: float) -> None:
        self.counts["answered"] += 1
        self.mean_s = seconds if self.mean_s is None else 0.8 * self.mean_s + 0.2 * seconds

    def drain(self) -> None:
        """Stop admitting: from now on the server answers new requests 503."""
        self.draining = True

    def cut(self) -> None:
        """End every request still running (ServerStopping) and refuse new ones."""
        self.draining = True
        self._stop.set()

    async def wait_idle(self, timeout: float | None) -> bool:
        """True once no request is held; False if `timeout` seconds pass first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True


async def _cancel(task: asyncio.Future[object]) -> None:
    """Cancel and wait for the task to end: a task awaiting a worker thread's future (asyncio.wrap_future) has
    cancelled that future once it ends. Bounded, for work that swallows its cancellation."""
    task.cancel()
    await asyncio.wait({task}, timeout=CANCEL_WAIT_S)
