"""Structured calls straight over HTTP (aiohttp): the lean twin of `agents.llm.astructured_call` for hot loops of
hundreds of same-shaped calls (analysis labeling).

Why: profiling `bench/labeling.py` at concurrency 32 showed ~30 ms of client CPU per labeling call through
ChatOpenAI (the openai SDK's request transform, httpcore's pool scan, LangChain's runnable/callback plumbing),
capping throughput at ~7 calls/s on the shared cores; the rollout path does the same (`serving/openai_policy.py`,
DESIGN §10). Built FROM a `RetryingChatOpenAI` (`from_chat_model`), it sends the request that model would: its own
parameters (`_default_params`, extra_body merged) + the messages + the SDK's response_format for the schema; through
the model's circuit breaker and retry policy (`_retry_args`; HTTP failures are raised as the openai SDK's exception
types so the one transient rule classifies them as for ChatOpenAI; exhausted -> `ModelEndpointError`). A malformed
answer (not JSON, invalid, refused, cut at max tokens) is re-asked once (prompts/structured_reask.md), then
`StructuredOutputError`; 401/403/404 -> `ModelError`; any other non-retryable answer, or a 200 that is not a chat
completion -> `ModelEndpointError`. One client per event loop: its aiohttp session is bound to the loop that opened it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Protocol, Self

import aiohttp
import httpx
import openai
from openai.lib._parsing._completions import type_to_response_format_param
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, RetryError

from gapforge.agents.errors import ModelEndpointError, ModelError
from gapforge.agents.llm import (
    PLACEHOLDER_API_KEY,
    RetryingChatOpenAI,
    _check_schema,
    _describe,
    _give_up,
    _one_line,
    is_transient,
)
from gapforge.envs.breaker import CircuitOpen
from gapforge.prompts import load_prompt

Message = dict[str, Any]  # OpenAI wire format: {"role": ..., "content": ...}
_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


class UsageSink(Protocol):  # agents.analysis.usage.UsageCounter fits
    calls: int
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Usage:
    calls: int = 0  # logical requests (a re-ask is a second one; HTTP retries of one request are not)
    prompt_tokens: int = 0
    completion_tokens: int = 0


@functools.cache
def response_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The json_schema response_format the openai SDK sends for `schema` (ChatOpenAI's default structured method)."""
    return type_to_response_format_param(schema)  # type: ignore[return-value]


class StructuredHTTP:
    """Structured chat completions against the endpoint of a `RetryingChatOpenAI`."""

    def __init__(self, model: RetryingChatOpenAI) -> None:
        self.model = model
        base = model.openai_api_base or "https://api.openai.com/v1"
        self.url = base.rstrip("/") + "/chat/completions"
        key = model.openai_api_key.get_secret_value() if model.openai_api_key else PLACEHOLDER_API_KEY
        self._headers = {
            **(model.default_headers or {}),
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
        }
        params = dict(model._default_params)
        params.update(params.pop("extra_body", None) or {})  # the SDK merges extra_body into the JSON body
        self._params = params
        timeout = model.request_timeout
        total = float(timeout) if isinstance(timeout, (int, float)) else 600.0  # 600 s: the openai SDK's default
        self._timeout = aiohttp.ClientTimeout(total=total)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_chat_model(cls, model: Any) -> StructuredHTTP | None:
        """A client for `model` when it is an endpoint chat model from the factory, else None
        (scripted models and other chat models keep `astructured_call`)."""
        return cls(model) if isinstance(model, RetryingChatOpenAI) else None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers)
        return self._session

    def body(self, messages: list[Message], schema: type[BaseModel]) -> dict[str, Any]:
        return {**self._params, "messages": messages, "response_format": response_format(schema)}

    async def acall(
        self, messages: list[Message], schema: type[BaseModel], *, usage: UsageSink | None = None
    ) -> BaseModel:
        """Ask for a `schema` object; re-ask once with the parse error; StructuredOutputError if still bad."""
        _check_schema(schema)
        usage = usage if usage is not None else Usage()
        raw, first, parsed = await self._ask(messages, schema, usage)
        if parsed is not None:
            return parsed
        reask = load_prompt("structured_reask.md").body.format(error=first, schema=schema.__name__)
        retry = [*messages, {"role": "assistant", "content": raw}, {"role": "user", "content": reask}]
        _, second, parsed = await self._ask(retry, schema, usage)
        if parsed is None:
            raise _give_up(schema, first, second)
        return parsed

    async def _ask(
        self, messages: list[Message], schema: type[BaseModel], usage: UsageSink
    ) -> tuple[str, str, BaseModel | None]:
        """(raw answer text, parse error, parsed or None) of one logical request."""
        usage.calls += 1
        data = await self._post(json.dumps(self.body(messages, schema)).encode())
        counts = data.get("usage") or {}
        usage.prompt_tokens += int(counts.get("prompt_tokens") or 0)
        usage.completion_tokens += int(counts.get("completion_tokens") or 0)
        choice = data["choices"][0]
        msg = choice["message"]
        raw = msg.get("content") or ""
        if msg.get("refusal"):
            return raw, f"the model refused: {_one_line(Exception(msg['refusal']))}", None
        if choice.get("finish_reason") == "length":
            return raw, "the answer was cut off at the token limit (finish_reason=length)", None
        if not raw:
            return raw, f"no {schema.__name__} object in the answer (empty content)", None
        try:
            return raw, "", schema.model_validate_json(raw)
        except ValidationError as e:
            return raw, _describe(e), None

    async def _post(self, body: bytes) -> dict[str, Any]:
        """POST with the model's retry policy; endpoint failures mapped to our errors (module doc)."""
        m = self.model
        breaker = m.breaker()
        try:
            async for attempt in AsyncRetrying(**m._retry_args()):
                with attempt, breaker.attempt(is_transient):
                    return await self._post_once(body)
        except CircuitOpen as err:
            raise m._down(err) from None
        except RetryError as err:
            raise m._exhausted(err) from err.last_attempt.exception()
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
            raise ModelError(
                f"model '{m.model_name}' at {self.url}: the endpoint refused the request ({e.status_code}): "
                "check the API key, the model name and the base URL"
            ) from None
        except openai.APIError as e:
            raise ModelEndpointError(
                f"model '{m.model_name}' at {self.url}: {type(e).__name__}: {_one_line(e)}"
            ) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _post_once(self, body: bytes) -> dict[str, Any]:
        request = httpx.Request("POST", self.url)
        try:
            async with self._http().post(self.url, data=body) as resp:
                status, text, headers = resp.status, await resp.text(), dict(resp.headers)
        except TimeoutError:
            raise openai.APITimeoutError(request=request) from None
        except aiohttp.ClientError as e:
            raise openai.APIConnectionError(message=f"{type(e).__name__}: {e}", request=request) from None
        if status == 200:
            try:
                data = json.loads(text)
                if not isinstance(data["choices"][0]["message"], dict):
                    raise TypeError("message is not an object")
            except (ValueError, KeyError, IndexError, TypeError):
                response = httpx.Response(status, headers=headers, text=text, request=request)
                raise openai.APIResponseValidationError(
                    response, text, message=f"answered 200 with a body that is not a chat completion: {text[:150]!r}"
                ) from None
            return data
        response = httpx.Response(status, headers=headers, text=text, request=request)
        try:
            err_body: object = json.loads(text)
        except ValueError:
            err_body = text
        cls = _STATUS_ERRORS.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)
        raise cls(f"Error code: {status} - {_one_line(Exception(text), 200)}", response=response, body=err_body)
