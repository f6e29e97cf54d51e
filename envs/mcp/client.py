"""One MCP client connection, usable from synchronous code on any thread.

The `mcp` SDK is async and the Environment protocol synchronous: a `Connection` runs its own event loop in a daemon
thread, where one task holds the transport and `ClientSession` open (stdio, the server's stderr to a temp file; or
streamable HTTP), and every `call` is a coroutine submitted to it. Every wait is bounded: the handshake by
`startup_timeout_s`, a call by `call_timeout_s`, `close()` by the SDK's own shutdown (stdin, SIGTERM, SIGKILL). A
dead server shows as the SDK's "Connection closed" at once; the connection is then `broken` and later calls fail fast.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT, PaginatedRequestParams, Tool

from gapforge.envs.mcp.errors import ServerFailure, ServerStartError, one_line

CLOSE_GRACE_S = 8.0  # the SDK's stdio shutdown waits at most ~4.5 s (flush, stdin close, SIGTERM, SIGKILL)


@dataclass(frozen=True)
class CallOutcome:
    """A tool's answer: `text` as the policy sees it, the structured content if the server sent any."""

    text: str
    is_error: bool
    structured: Any = None

    def value(self) -> Any:
        """The answer as data: structured content, else the text parsed as JSON, else the text."""
        if self.structured is not None:
            return self.structured
        try:
            return json.loads(self.text)
        except ValueError:
            return self.text


def render(result: Any) -> CallOutcome:
    """A `CallToolResult` as one tool message: text blocks joined by newlines; with no text, the structured
    content as JSON; other blocks (images, audio, resources) named in brackets."""
    texts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            texts.append(block.resource.text)
        else:
            texts.append(f"[{kind} content: {getattr(block, 'mime_type', None) or 'not shown'}]")
    structured = result.structured_content
    text = "\n".join(texts) if texts else (json.dumps(structured, ensure_ascii=False) if structured is not None else "")
    return CallOutcome(text=text, is_error=bool(result.is_error), structured=structured)


class Connection:
    """A started MCP server (or a session with a URL server) and its tool list."""

    def __init__(
        self,
        *,
        label: str,
        argv: tuple[str, ...] | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        url: str | None = None,
        startup_timeout_s: float = 20.0,
        call_timeout_s: float = 60.0,
    ) -> None:
        self.label, self.url, self.call_timeout_s = label, url, call_timeout_s
        self.broken = False
        self.calls = 0  # tool calls made on this connection (restart mode: a used server is replaced)
        self.in_flight = 0  # calls not returned yet (one an episode abandoned at its time limit among them)
        self._count_lock = threading.Lock()
        self._stderr_path: str | None = None
        if argv is not None:
            fd, self._stderr_path = tempfile.mkstemp(prefix="gapforge-mcp-", suffix=".stderr")
            os.close(fd)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{label}", daemon=True)
        self._thread.start()
        self._stop = asyncio.Event()  # bound to the loop at its first use there
        self._task: asyncio.Task[None] | None = None
        self._session: ClientSession | None = None
        self._ready: concurrent.futures.Future[list[Tool]] = concurrent.futures.Future()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(argv, cwd, env or {}, url), self._loop)
        try:
            self.tools: list[Tool] = self._ready.result(timeout=startup_timeout_s)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ServerStartError(
                f"{label}: the MCP server did not answer the handshake within {startup_timeout_s:g} s"
                f"{self._tail_note()}: check server.command / server.url, or raise server.startup_timeout_s"
            ) from None
        except Exception as err:
            note = self._tail_note()
            self.close()
            what = "cannot be reached" if url else "did not start"
            raise ServerStartError(
                f"{label}: the MCP server {what} ({_leaf(err)}){note}: fix server.command / server.url "
                "in the task file, or run the server by hand to see why"
            ) from None

    def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        """Call one tool. A tool error or a protocol error about the call is an outcome (`is_error`); the server
        being gone or silent past `call_timeout_s` raises `ServerFailure` with its stderr's last words."""
        if self.broken or self._session is None:
            raise ServerFailure(f"{self.label}: the MCP server connection is gone{self._tail_note()}")
        with self._count_lock:
            self.calls += 1
            self.in_flight += 1
        try:
            return self._call(name, arguments)
        finally:
            with self._count_lock:
                self.in_flight -= 1

    def _call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        assert self._session is not None
        coro = self._session.call_tool(name, arguments, read_timeout_seconds=self.call_timeout_s)
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return render(fut.result(timeout=self.call_timeout_s + 5.0))
        except MCPError as err:
            if err.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                self.broken = True
                why = (
                    "closed the connection (the server process ended)"
                    if err.code == CONNECTION_CLOSED
                    else "did not answer in time"
                )
                raise ServerFailure(f"{self.label}: the MCP server {why} at tool '{name}'{self._tail_note()}") from None
            return CallOutcome(text=err.message, is_error=True)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            self.broken = True
            raise ServerFailure(
                f"{self.label}: no answer from the MCP server to tool '{name}' within "
                f"{self.call_timeout_s:g} s{self._tail_note()}"
            ) from None

    @property
    def alive(self) -> bool:
        return not self.broken and self._session is not None and not self._serving.done()

    def stderr_tail(self, limit: int = 300) -> str:
        """The last words the server wrote to stderr, on one line ('' for a URL server)."""
        if not self._stderr_path:
            return ""
        try:
            with open(self._stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self._stderr_path) - 4 * limit))
                return one_line(f.read().decode("utf-8", "replace"), limit)
        except OSError:
            return ""

    def close(self) -> None:
        """End the session and the server (bounded), then the loop and its thread. Idempotent."""
        if self._loop.is_closed():
            return
        serving = self._ready.done() and self._ready.exception() is None
        if serving:  # waiting for the stop: the session and the transport end in order
            self._loop.call_soon_threadsafe(self._stop.set)
            with contextlib.suppress(BaseException):
                self._serving.result(timeout=CLOSE_GRACE_S)
        if not self._serving.done():  # stuck in the handshake, or in the stop: cancel, let it unwind
            with contextlib.suppress(BaseException):
                asyncio.run_coroutine_threadsafe(self._cancel_serving(), self._loop).result(timeout=CLOSE_GRACE_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_GRACE_S)
        if not self._thread.is_alive():
            self._loop.close()
        if self._stderr_path:
            with contextlib.suppress(OSError):
                os.unlink(self._stderr_path)
            self._stderr_path = None

    def _tail_note(self) -> str:
        tail = self.stderr_tail()
        return f"; its stderr ends: {tail!r}" if tail else ""

    async def _cancel_serving(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task  # the transports' own shutdown is bounded (stdio: stdin closed, SIGTERM, SIGKILL)

    async def _serve(self, argv: tuple[str, ...] | None, cwd: str | None, env: dict[str, str], url: str | None) -> None:
        self._task = asyncio.current_task()
        try:
            async with contextlib.AsyncExitStack() as stack:
                if url is not None:
                    read, write = await stack.enter_async_context(streamable_http_client(url))
                else:
                    assert argv is not None and self._stderr_path is not None
                    errlog = stack.enter_context(open(self._stderr_path, "a", encoding="utf-8"))
                    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=cwd, env=env or None)
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools = await _list_all(session)
                self._session = session
                self._ready.set_result(tools)
                await self._stop.wait()
        except BaseException as err:
            if not self._ready.done():
                self._ready.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            if not isinstance(err, Exception):
                raise
        finally:
            self.broken = True


async def _list_all(session: ClientSession) -> list[Tool]:
    tools: list[Tool] = []
    cursor = None
    while True:
        page = await session.list_tools(params=None if cursor is None else PaginatedRequestParams(cursor=cursor))
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _leaf(err: BaseException) -> str:
    """The innermost error of an exception group, as `Type: message` on one line."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return one_line(f"{type(err).__name__}: {err}", 200)
