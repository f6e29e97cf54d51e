"""`RoutedServer`: a RoutedApp (serving/routed_server.py) on 127.0.0.1 in a background thread, for the tests and
bench/, run as `gapforge serve` runs it (serving.http_server.app_runner)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Self

from aiohttp import web

from gapforge.serving.errors import ServingError
from gapforge.serving.http_server import app_runner
from gapforge.serving.routed_server import RoutedApp


class RoutedServer:
    """Run a RoutedApp on 127.0.0.1 in a background thread: `with RoutedServer(app) as s: s.base_url`."""

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
            self._runner = app_runner(self.routed)
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
