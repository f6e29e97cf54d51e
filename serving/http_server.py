"""Running a RoutedApp: `serve_until_signalled` (the `gapforge serve` process) and `RoutedServer` (a background
thread, for tests and benchmarks).

Both run aiohttp with handler cancellation on: a client that disconnects has its handler task cancelled, which
cancels its generation (serving/admission.py, serving/batching.py) and frees its place in the queue.

`serve_until_signalled` drains on SIGTERM / SIGINT: new requests are answered 503 while the listening socket
stays open (a client is told to go elsewhere rather than refused a connection), the requests in flight get up to
`drain_timeout_s` to finish, those still running are then answered 503, and the function returns what happened.
A second signal ends the wait at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from aiohttp import web

from gapforge.serving.errors import ServingError

if TYPE_CHECKING:
    from gapforge.serving.routed_server import RoutedApp

FLUSH_S = 5.0  # after the drain: how long aiohttp may take to write the last answers before closing connections


@dataclass(frozen=True)
class Drained:
    in_flight: int  # requests in flight when the signal came
    finished: bool  # every one of them ended within the drain timeout
    cut: int  # requests answered 503 at the drain timeout


def _runner(routed: RoutedApp) -> web.AppRunner:
    return web.AppRunner(routed.app(), handler_cancellation=True, shutdown_timeout=FLUSH_S, access_log=None)


async def serve_until_signalled(
    routed: RoutedApp,
    host: str,
    port: int,
    *,
    drain_timeout_s: float,
    say: Callable[[str], None],
    ready: Callable[[int], None] | None = None,
) -> Drained:
    """Serve until SIGTERM or SIGINT, then drain (module docstring). `ready(port)` runs once the socket listens."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals: list[int] = []

    def on_signal(sig: int) -> None:
        signals.append(sig)
        if len(signals) == 1:
            stop.set()
        else:  # a second signal: stop waiting for the requests in flight
            routed.admission.cut()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    runner = _runner(routed)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        if ready is not None:
            ready(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await stop.wait()
        admission = routed.admission
        admission.drain()
        held = admission.in_flight
        say(
            f"{signal.Signals(signals[0]).name}: draining {held} request(s) in flight (up to {drain_timeout_s:g} s); new requests get 503"
        )
        finished = await admission.wait_idle(drain_timeout_s)
        before = admission.counts["cut"]
        if not finished:
            admission.cut()  # the rest are answered 503 and their generations cancelled
            await admission.wait_idle(FLUSH_S)
        return Drained(held, finished, admission.counts["cut"] - before)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()


class RoutedServer:
    """Run a RoutedApp on 127.0.0.1 in a background thread (tests, benchmarks): `with RoutedServer(app) as s: s.base_url`."""

    def __init__(self, routed: RoutedApp, host: str = "127.0.0.1", port: int = 0) -> None:
        self.routed = routed
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def call(self, fn: Callable[[], object]) -> None:
        """Run `fn` on the server's event loop (e.g. `routed.admission.drain`) and wait for it."""
        assert self._loop is not None

        async def run() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def __enter__(self) -> Self:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def start() -> None:
            self._runner = _runner(self.routed)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, self.port)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())  # type: ignore[union-attr]
            self._loop.run_forever()  # type: ignore[union-attr]

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise ServingError("the routed server did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
