"""Running a RoutedApp: `serve_until_signalled` (the `gapforge serve` process; tests and benchmarks run one on a
background thread with tests/fakes/routed_server.py, over the same `app_runner`).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gapforge.serving.routed_server import RoutedApp

FLUSH_S = 5.0  # after the drain: how long aiohttp may take to write the last answers before closing connections


@dataclass(frozen=True)
class Drained:
    in_flight: int  # requests in flight when the signal came
    finished: bool  # every one of them ended within the drain timeout
    cut: int  # requests answered 503 at the drain timeout


def app_runner(routed: RoutedApp) -> web.AppRunner:
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
    runner = app_runner(routed)
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
