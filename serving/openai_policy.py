"""`EndpointPolicy`: the policy behind any OpenAI-compatible chat endpoint
(vLLM, OpenAI, the fake server), spoken to directly over HTTP with aiohttp.

Why not ChatOpenAI here: rollouts send the same large prompt (policy text +
tool schemas) hundreds of times concurrently, and profiling the collector at
concurrency 32 showed the openai SDK's request transformation alone costing
~4 ms of CPU per request, which capped throughput far below the latency-bound
ideal (bench/rollout_concurrency.py). Agent roles (analyst, generator, ...)
keep using langchain-openai; only the hot rollout path is lean. aiohttp rather
than httpx: httpcore's connection pool scans every pooled connection (with a
getpeername + poll syscall each) for every request, which profiled as over
half the collector's CPU at concurrency 64.

Retries: connection errors, timeouts, 408/429/5xx and 200 answers that are not
a chat completion (a body that is not JSON, no choices: the server's fault,
never the model's), with jittered exponential backoff that waits at least what
a `Retry-After` header asks (capped at `max_retry_after_s`); after the last
attempt -> EndpointError (the episode ends, not the run, and is not final: a
resume redoes it). A circuit breaker shared by every client of the endpoint's base URL in the process
(envs/breaker.py; the agent roles use the same one) fails calls at once while the endpoint is down, so an
outage costs seconds, not minutes of retries. 400 -> PolicyError. 401/403/404
-> ServingError (the user must fix the key, model name or URL). Unparseable
tool-call arguments -> MalformedOutputError (the model's output).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import yarl
from tenacity import wait_exponential_jitter

from gapforge.envs.breaker import CircuitBreaker, CircuitOpen, breaker_for
from gapforge.envs.errors import EndpointError, MalformedOutputError, PolicyError, is_transient_status
from gapforge.envs.protocol import Message, ToolCall
from gapforge.faults import EndpointFault
from gapforge.serving.errors import ServingError
from gapforge.serving.tool_calls import split_reasoning

# The endpoint's circuit breaker, one per base URL in the process, shared with the agent roles' client (agents/llm.py,
# the same values): this many consecutive failed requests mark the endpoint down; calls then fail at once for the
# cooldown (seconds), then one probe.
BREAKER_FAILURES, BREAKER_COOLDOWN_S = 8, 30.0

USER_FIX_STATUS = {
    401: "check the API key",
    403: "check the API key's permissions",
    404: "check the base URL and model name",
}


class _Transient(EndpointFault):
    def __init__(self, status: int, body: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}")
        self.retry_after = retry_after


def retry_after_s(value: str | None) -> float | None:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP date); None if absent/invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, CircuitOpen):
        return exc.probing  # another caller's probe decides in a moment: retry after the backoff
    return isinstance(exc, (_Transient, aiohttp.ClientError, asyncio.TimeoutError))


class EndpointPolicy:
    """PolicyModel over POST {base_url}/chat/completions. Use one instance per event loop's lifetime
    or let it rebuild its client: the HTTP client is bound to the loop that created it."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 1.0,
        max_tokens: int | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        retry_backoff_s: float = 1.0,
        max_retry_after_s: float = 60.0,
        name: str | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ServingError(f"policy endpoint '{base_url}' is not an http(s) URL: e.g. http://localhost:8000/v1")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.name = name or f"endpoint:{model}"
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.attempts = max_retries + 1
        self.backoff_s = retry_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self._backoff = wait_exponential_jitter(
            multiplier=retry_backoff_s, max=30 * retry_backoff_s, jitter=retry_backoff_s
        )
        self.breaker: CircuitBreaker = breaker_for(base_url, failures=BREAKER_FAILURES, cooldown_s=BREAKER_COOLDOWN_S)
        self._headers = {"Authorization": f"Bearer {api_key or 'not-needed'}", "Content-Type": "application/json"}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._url = yarl.URL(self.url)  # parsed once, not per request
        self._model_json = json.dumps(model)
        self._wire_cache = WireCache()

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session (call from the loop that used it). A session whose loop has
        already ended cannot be closed from another loop: it is dropped."""
        if self._loop is not None and self._loop.is_closed():
            self._session, self._loop = None, None
            return
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def body_text(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        temperature: float | None,
        max_tokens: int | None = None,
    ) -> str:
        """The request's JSON text (model, messages, temperature, tools when any, max_tokens when set), from fragments
        serialized once: an episode resends its whole conversation and the same tool schemas on every turn, so each
        message (and each tool list) is encoded once per episode."""
        cache = self._wire_cache
        text = (
            f'{{"model":{self._model_json},"messages":[{",".join([cache.text(m, _wire_json) for m in messages])}],'
            f'"temperature":{json.dumps(self.temperature if temperature is None else temperature)}'
        )
        if tools:
            text += ',"tools":' + cache.text(tools, json.dumps)
        if max_tokens or self.max_tokens:
            text += f',"max_tokens":{int(max_tokens or self.max_tokens)}'
        return text + "}"

    async def _post(self, body: str) -> dict[str, Any]:
        with self.breaker.attempt(_transient):
            async with self._http().post(self._url, data=body.encode()) as resp:
                status, text = resp.status, await resp.text()
                retry_after = retry_after_s(resp.headers.get("Retry-After"))
            if status == 200:
                try:
                    data = json.loads(text)
                    data["choices"][0]["message"]
                except json.JSONDecodeError:
                    raise _Transient(200, f"body is not JSON: {text[:150]!r}") from None
                except (KeyError, IndexError, TypeError):
                    raise _Transient(200, f"not a chat completion (no choices[0].message): {text[:150]!r}") from None
                return data
            if is_transient_status(status):
                raise _Transient(status, text, retry_after)
            if status in USER_FIX_STATUS:
                raise ServingError(f"policy endpoint {self.url} answered HTTP {status}: {USER_FIX_STATUS[status]}")
            raise PolicyError(f"policy endpoint rejected the request: HTTP {status}: {text[:300]}")

    def _wait(self, attempt: int, exc: BaseException | None) -> float:
        """Seconds before retry number `attempt`: jittered exponential backoff, at least what a Retry-After asked."""
        backoff = self._backoff(SimpleNamespace(attempt_number=attempt))
        asked = getattr(exc, "retry_after", None)
        return backoff if asked is None else min(max(backoff, asked), self.max_retry_after_s)

    async def respond(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        """max_tokens: this call's limit (else the policy's). A plain loop over the attempts: the common case
        (first attempt answers) costs no retry machinery (a tenacity controller per call was ~0.1 ms of CPU)."""
        body = self.body_text(messages, tools, temperature, max_tokens)
        last: BaseException | None = None
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self._wait(attempt - 1, last))
            try:
                data = await self._post(body)
                break
            except CircuitOpen as e:
                if not e.probing:  # the endpoint is known down: fail at once
                    raise EndpointError(str(e)) from None
                last = e
            except Exception as e:
                if not _transient(e):
                    raise
                last = e
        else:
            if isinstance(last, CircuitOpen):
                raise EndpointError(str(last)) from None
            raise EndpointError(
                f"policy endpoint {self.url} failed {self.attempts} attempt(s), last: {type(last).__name__}: {last}"
            ) from None
        return parse_completion(data)


class WireCache:
    """JSON text of objects already sent, by identity (a reference is held, so an id is never reused while
    cached). Messages and tool lists are never changed after they are sent; bounded, least recently used out."""

    def __init__(self, size: int = 8192) -> None:
        self.size = size
        self._items: OrderedDict[int, tuple[object, str]] = OrderedDict()

    def text(self, obj: Any, render: Callable[[Any], str]) -> str:
        key = id(obj)
        hit = self._items.get(key)
        if hit is not None and hit[0] is obj:
            self._items.move_to_end(key)
            return hit[1]
        text = render(obj)
        self._items[key] = (obj, text)
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return text


def _wire_json(m: Message) -> str:
    return json.dumps(_wire(m))


def _wire(m: Message) -> dict[str, Any]:
    """A message for the policy endpoint; an assistant turn's reasoning goes back as the <think> block it came as, which
    Qwen3's templates (stock and serving/qwen3_training.jinja) split off again, on any vLLM version."""
    out = m.to_openai()
    if m.role == "assistant" and m.reasoning is not None:
        out["content"] = f"<think>\n{m.reasoning}\n</think>\n\n{m.content or ''}"
    return out


def parse_completion(data: dict[str, Any]) -> Message:
    """An OpenAI chat.completion JSON -> our assistant Message."""
    try:
        msg = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise MalformedOutputError("completion has no choices[0].message", raw=json.dumps(data)[:2000]) from None
    calls = []
    for i, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") or {}
        raw_args = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw_args) if isinstance(raw_args, str) else raw_args
        except json.JSONDecodeError as e:
            raise MalformedOutputError(
                f"tool call '{fn.get('name')}' has invalid JSON arguments: {e}", raw=str(raw_args)
            ) from None
        if not fn.get("name") or not isinstance(args, dict):
            raise MalformedOutputError("tool call without a name or with non-object arguments", raw=json.dumps(tc))
        calls.append(ToolCall(id=tc.get("id") or f"call_{i}", name=fn["name"], arguments=args))
    reasoning = msg.get("reasoning_content", msg.get("reasoning"))  # vLLM with --reasoning-parser qwen3
    content = msg.get("content")
    if reasoning is None and isinstance(content, str):  # no reasoning parser: the <think> block is in the content
        reasoning, rest = split_reasoning(content)
        if reasoning is not None:
            content = rest.strip() or None
    return Message(
        role="assistant", content=content, tool_calls=calls, reasoning=reasoning if isinstance(reasoning, str) else None
    )
