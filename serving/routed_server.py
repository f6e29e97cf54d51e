"""The routed OpenAI-compatible endpoint (aiohttp) of `gapforge serve`: routes, routing, API key and limits as
serving/README.md ("The routed endpoint") says. Beyond that: the answer also carries `X-Gapforge-Conversation`; a
malformed request gets 400 with an OpenAI-style error body naming what is wrong, and an unexpected failure a JSON 500
without a traceback, never aiohttp's text page. A completion whose tool call cannot be parsed is answered 200 as plain
text (`finish_reason` "stop", the error in `gapforge.malformed_tool_call`): vLLM's tool parsers do the same, and a 5xx
would make OpenAI clients retry a deterministic failure. Limits: serving/admission.py; draining on SIGTERM:
serving/http_server.py; `/health` reports the requests in flight and the counts.

The backend is anything with `name`, `adapters` and `async respond(messages, tools, *, adapter, temperature,
max_new_tokens) -> Message`: serving.multi_adapter.MultiAdapterModel (local) or serving.vllm_backend.VLLMBackend.
The router is a callable `messages -> decision` (an object with `adapter` and `to_json()`), built by the composition
root (serving never imports agents/).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from gapforge.envs.errors import MalformedOutputError, PolicyError
from gapforge.envs.protocol import Message
from gapforge.faults import first_problem
from gapforge.serving.admission import Admission, RequestTimedOut, ServerStopping
from gapforge.serving.config import ServeConfig
from gapforge.serving.errors import ServingError
from gapforge.serving.openai_wire import BadRequest, ChatRequest, conversation_key, error, to_message

ROUTED_MODEL = "gapforge-router"
OPEN_ROUTES = frozenset({"/health"})
log = logging.getLogger(__name__)


class RoutedApp:
    def __init__(
        self,
        backend: Any,  # the module docstring says what it has
        router: Callable[[list[dict[str, Any]]], Any] | None,
        *,
        routed_name: str = ROUTED_MODEL,
        cache_size: int = 10_000,
        api_key: str | None = None,
        limits: ServeConfig | None = None,
    ) -> None:
        self.api_key, self.limits = api_key, limits or ServeConfig()
        self.admission = Admission(self.limits.max_queue, self.limits.request_timeout_s)
        self.backend, self.router, self.routed_name, self.cache_size = backend, router, routed_name, cache_size
        self.cache: OrderedDict[str, Any] = OrderedDict()
        self._route_locks: dict[str, asyncio.Lock] = {}
        self.routed_count = 0  # router forward passes run (cache misses)

    @web.middleware
    async def _guard(self, req: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        """The API key on every route but /health; OpenAI-style JSON for every error, never a traceback."""
        if self.api_key is not None and req.path not in OPEN_ROUTES:
            given = req.headers.get("Authorization", "")
            token = given[7:] if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode(), self.api_key.encode()):
                return error(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", code="invalid_api_key")
        if self.admission.draining and req.path not in OPEN_ROUTES:
            self.admission.counts["refused_draining"] += 1
            return self._stopping("the server is shutting down and takes no new requests")
        try:
            return await handler(req)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            code = "not_found" if e.status == 404 else None
            return error(e.status, f"{req.method} {req.path}: {e.reason}", code=code)
        except Exception as e:  # noqa: BLE001 - the client gets one JSON line; the log keeps the traceback
            log.exception("routed server: %s %s failed", req.method, req.path)
            return error(500, f"internal error ({type(e).__name__}); the server log has the details", "server_error")

    def app(self) -> web.Application:
        """The aiohttp app; each one starts with a fresh admission (its events belong to the loop that runs it)."""
        self.admission = Admission(self.limits.max_queue, self.limits.request_timeout_s)
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
        """200 while serving, 503 while draining (a load balancer stops sending); the queue and its counts either way."""
        adm = self.admission
        return web.json_response(
            {
                "status": "draining" if adm.draining else "ok",
                "base": self.backend.name,
                "adapters": self.backend.adapters,
                "routing": self.router is not None,
                "in_flight": adm.in_flight,
                "max_queue": adm.max_queue,
                "counts": dict(adm.counts),
            },
            status=503 if adm.draining else 200,
        )

    def _later(self, status: int, why: str, kind: str, code: str, then: str = "") -> web.Response:
        wait = str(self.admission.retry_after())
        return error(status, f"{why}: retry after {wait} s{then}", kind, code, headers={"Retry-After": wait})

    def _stopping(self, why: str) -> web.Response:
        return self._later(
            503, why, "server_error", "server_shutting_down", " (another replica, or this one restarted)"
        )

    async def models(self, _req: web.Request) -> web.Response:
        ids = [self.routed_name, self.backend.name, *self.backend.adapters]
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "gapforge"} for i in ids]
        return web.json_response({"object": "list", "data": data})

    async def _route(self, key: str, raw: list[dict[str, Any]]) -> tuple[Any, bool]:
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key], True
        lock = self._route_locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:  # two first requests of one conversation route once
                if key in self.cache:
                    return self.cache[key], True
                decision = await asyncio.to_thread(self.router, raw) if self.router else None
                self.routed_count += 1
                self.cache[key] = decision
                while len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
        finally:  # a router that raised too: one entry per conversation would stay for the server's lifetime
            self._route_locks.pop(key, None)
        return decision, False

    async def chat(self, req: web.Request) -> web.Response:
        """Admit (429 past max_queue), then answer within request_timeout_s (504) unless the server stops first (503)."""
        adm = self.admission
        if not adm.enter():
            why = f"the server already holds serving.max_queue={adm.max_queue} requests"
            return self._later(429, why, "rate_limit_error", "queue_full")
        try:
            return await adm.run(self._answer(req))
        except RequestTimedOut as e:
            why = f"{e}: the model is slower than that under this load; ask for fewer tokens, or retry later"
            return error(504, why, "timeout_error", "request_timeout")
        except ServerStopping as e:
            return self._stopping(str(e))
        finally:
            adm.leave()

    async def _answer(self, req: web.Request) -> web.Response:
        try:
            raw = json.loads(await req.read())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error(400, "the request body is not JSON")
        try:
            body = ChatRequest.model_validate(raw)
            messages = [to_message(m, f"messages.{i}") for i, m in enumerate(body.messages)]
        except ValidationError as e:
            return error(400, first_problem(e))
        except BadRequest as e:
            return error(400, str(e))
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
            why = "GET /v1/models lists the routed model, the base and the adapters"
            return error(404, f"model '{body.model}' does not exist: {why}", "model_not_found")
        try:
            reply = await self.backend.respond(
                messages,
                body.tools or [],
                adapter=adapter,
                temperature=1.0 if body.temperature is None else body.temperature,  # OpenAI's default
                max_new_tokens=body.max_completion_tokens or body.max_tokens,
            )
        except ServingError as e:
            return error(400, str(e))
        except MalformedOutputError as e:  # the model's own broken output: plain text, said so
            reply, malformed = Message.assistant(content=e.raw or str(e)), str(e)
        except PolicyError as e:
            return error(502, f"the model backend failed: {e}", "backend_error")
        out = reply.to_openai()
        finish = "tool_calls" if reply.tool_calls else "stop"
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [{"index": 0, "message": out, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "gapforge": {
                "adapter": adapter,
                "conversation": conv,
                **route,
                **({"malformed_tool_call": malformed} if malformed else {}),
            },
        }
        headers = {"X-Gapforge-Adapter": adapter or "base", "X-Gapforge-Conversation": conv}
        return web.json_response(payload, headers=headers)
