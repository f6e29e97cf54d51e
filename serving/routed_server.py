"""The routed OpenAI-compatible endpoint (aiohttp): `/v1/chat/completions` (tools
and tool calls in OpenAI format), `/v1/models` (the routed model, the base, every
adapter), `/health`.

Request `model`: the routed name (default `gapforge-router`) routes the
conversation ONCE, on its first user message, and caches the decision per
conversation (key: the `X-Conversation-Id` header, else a hash of the messages
up to the first user turn); an adapter's name or the base name bypasses routing.
The answer carries the decision in the `gapforge` field of the JSON and the
`X-Gapforge-Adapter` / `X-Gapforge-Conversation` headers.

With an API key (`RoutedApp(..., api_key=KEY)`, `gapforge serve --api-key-env NAME`)
every route but `/health` needs `Authorization: Bearer KEY` (401 otherwise). A
malformed request (not JSON, unknown fields, a message or tool call of the wrong
shape) gets 400 with an OpenAI-style error body naming what is wrong; an
unexpected failure is a JSON 500 without a traceback, never aiohttp's text page.

A completion whose tool call cannot be parsed (broken `<tool_call>` JSON) is NOT an
error: it is answered 200 as plain text — the raw completion as `content`, no
`tool_calls`, `finish_reason` "stop" — with the parse error in
`gapforge.malformed_tool_call` (vLLM's tool parsers do the same; a 5xx would make
OpenAI clients retry a deterministic failure). Other backend failures are 502.

The backend is anything with `name`, `adapters` and `async respond(messages,
tools, *, adapter, temperature, max_new_tokens) -> Message`:
serving.multi_adapter.MultiAdapterModel (local) or serving.vllm_backend.VLLMBackend.
The router is a callable `messages -> decision` (an object with `adapter` and
`to_json()`), built by the composition root (serving never imports agents/).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal, Protocol, Self

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import MalformedOutputError, PolicyError
from envs.protocol import Message, ToolCall
from serving.errors import ServingError

ROUTED_MODEL = "gapforge-router"
OPEN_ROUTES = frozenset({"/health"})
log = logging.getLogger(__name__)


class BadRequest(ValueError):
    """A request of the wrong shape; the message says which part (400)."""


class ChatBackend(Protocol):
    name: str

    @property
    def adapters(self) -> list[str]: ...

    async def respond(self, messages: list[Message], tools: list[dict[str, Any]], *, adapter: str | None, temperature: float, max_new_tokens: int | None) -> Message: ...


class ChatRequest(BaseModel):
    """The chat-completions fields we accept; anything else is refused with a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: Literal[False] | None = None
    n: Literal[1] | None = None
    seed: int | None = None
    top_p: float | None = None
    stop: Any = None
    user: str | None = None
    metadata: dict[str, Any] | None = None


def _tool_call(where: str, tc: Any, i: int) -> ToolCall:
    fn = tc.get("function") if isinstance(tc, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise BadRequest(f"{where}.tool_calls.{i}: expected {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}")
    args = fn.get("arguments") or "{}"
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            raise BadRequest(f"{where}.tool_calls.{i}.function.arguments is not JSON") from None
    if not isinstance(args, dict):
        raise BadRequest(f"{where}.tool_calls.{i}.function.arguments must be a JSON object")
    return ToolCall(id=str(tc.get("id") or f"call_{i}"), name=fn["name"], arguments=args)


def to_message(d: Any, where: str = "message") -> Message:
    """An OpenAI wire message -> Message (tool-call arguments parsed from their JSON string); BadRequest
    naming the part when it has the wrong shape."""
    if not isinstance(d, dict) or "role" not in d:
        raise BadRequest(f"{where}: expected an object with a 'role'")
    content = d.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    raw_calls = d.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list")
    calls = [_tool_call(where, tc, i) for i, tc in enumerate(raw_calls)]
    try:
        return Message(role=d["role"], content=content, tool_calls=calls, tool_call_id=d.get("tool_call_id"), name=d.get("name"))
    except ValidationError as e:
        first = e.errors()[0]
        raise BadRequest(f"{where}.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def conversation_key(messages: list[dict[str, Any]]) -> str:
    """sha256 of the messages up to and including the first user turn: the same conversation, the same key."""
    head = []
    for m in messages:
        head.append({"role": m.get("role"), "content": m.get("content")})
        if m.get("role") == "user":
            break
    return hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": code}}, status=status)


class RoutedApp:
    def __init__(
        self, backend: ChatBackend, router: Callable[[list[dict[str, Any]]], Any] | None, *, routed_name: str = ROUTED_MODEL,
        cache_size: int = 10_000, api_key: str | None = None,
    ) -> None:  # fmt: skip
        self.api_key = api_key
        self.backend = backend
        self.router = router
        self.routed_name = routed_name
        self.cache: OrderedDict[str, Any] = OrderedDict()
        self.cache_size = cache_size
        self._route_locks: dict[str, asyncio.Lock] = {}
        self.routed_count = 0  # router forward passes run (cache misses)

    @web.middleware
    async def _guard(self, req: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        """The API key on every route but /health; OpenAI-style JSON for every error, never a traceback."""
        if self.api_key is not None and req.path not in OPEN_ROUTES:
            given = req.headers.get("Authorization", "")
            token = given[7:] if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode(), self.api_key.encode()):
                return _error(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "invalid_request_error", "invalid_api_key")
        try:
            return await handler(req)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return _error(e.status, f"{req.method} {req.path}: {e.reason}", "invalid_request_error", "not_found" if e.status == 404 else None)
        except Exception as e:  # noqa: BLE001 - the client gets one JSON line; the log keeps the traceback
            log.exception("routed server: %s %s failed", req.method, req.path)
            return _error(500, f"internal error ({type(e).__name__}); the server log has the details", "server_error")

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.on_cleanup.append(self._close_backend)
        return app

    async def _close_backend(self, _app: web.Application) -> None:
        aclose = getattr(self.backend, "aclose", None)  # e.g. VLLMBackend's HTTP sessions live on this loop
        if aclose is not None:
            await aclose()

    async def health(self, _req: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "base": self.backend.name, "adapters": self.backend.adapters, "routing": self.router is not None})

    async def models(self, _req: web.Request) -> web.Response:
        ids = [self.routed_name, self.backend.name, *self.backend.adapters]
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "gapforge"} for i in ids]
        return web.json_response({"object": "list", "data": data})

    async def _route(self, key: str, raw: list[dict[str, Any]]) -> tuple[Any, bool]:
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key], True
        lock = self._route_locks.setdefault(key, asyncio.Lock())
        async with lock:  # two first requests of one conversation route once
            if key in self.cache:
                return self.cache[key], True
            decision = await asyncio.to_thread(self.router, raw) if self.router else None
            self.routed_count += 1
            self.cache[key] = decision
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        self._route_locks.pop(key, None)
        return decision, False

    async def chat(self, req: web.Request) -> web.Response:
        try:
            raw = json.loads(await req.read())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the request body is not JSON")
        try:
            body = ChatRequest.model_validate(raw)
            messages = [to_message(m, f"messages.{i}") for i, m in enumerate(body.messages)]
        except ValidationError as e:
            first = e.errors()[0]
            return _error(400, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
        except BadRequest as e:
            return _error(400, str(e))
        route: dict[str, Any] = {}
        malformed: str | None = None
        conv = req.headers.get("X-Conversation-Id") or conversation_key(body.messages)
        if body.model == self.routed_name:
            decision, cached = await self._route(conv, body.messages)
            adapter = getattr(decision, "adapter", None)
            route = {"decision": decision.to_json() if decision is not None else None, "cached": cached}
        elif body.model == self.backend.name:
            adapter = None
        elif body.model in self.backend.adapters:
            adapter = body.model
        else:
            return _error(404, f"model '{body.model}' does not exist: GET /v1/models lists the routed model, the base and the adapters", "model_not_found")
        try:
            reply = await self.backend.respond(
                messages,
                body.tools or [],
                adapter=adapter,
                temperature=1.0 if body.temperature is None else body.temperature,  # OpenAI's default
                max_new_tokens=body.max_completion_tokens or body.max_tokens,
            )
        except ServingError as e:
            return _error(400, str(e))
        except MalformedOutputError as e:  # the model's own broken output: plain text, said so
            reply, malformed = Message.assistant(content=e.raw or str(e)), str(e)
        except PolicyError as e:
            return _error(502, f"the model backend failed: {e}", "backend_error")
        out = reply.to_openai()
        finish = "tool_calls" if reply.tool_calls else "stop"
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [{"index": 0, "message": out, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "gapforge": {"adapter": adapter, "conversation": conv, **route, **({"malformed_tool_call": malformed} if malformed else {})},
        }
        headers = {"X-Gapforge-Adapter": adapter or "base", "X-Gapforge-Conversation": conv}
        return web.json_response(payload, headers=headers)


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

    def __enter__(self) -> Self:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def start() -> None:
            self._runner = web.AppRunner(self.routed.app())
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
