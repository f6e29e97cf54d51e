"""Chat models for the agent roles: the factory, the one retry policy, structured calls.

- `make_chat_model(endpoint)`: a ChatOpenAI against any OpenAI-compatible base
  URL whose every request is retried here (and only here: the openai client's
  own retries are off) on 429 / 408 / 5xx / timeouts / connection errors, with
  exponential backoff. After the last attempt it raises ModelEndpointError. Every
  attempt goes through the endpoint's process-wide circuit breaker
  (`envs.breaker.breaker_for(base URL)`, the same one the rollout policy uses):
  once the endpoint is down, calls fail at once with one ModelEndpointError line
  instead of each spending its retries; after the cooldown one probe tries again.
- `structured_call(model, messages, schema)`: a pydantic answer; a malformed one
  (bad JSON, failed validation, no structure at all) is re-asked once with the
  parse error appended (prompt: prompts/structured_reask.md).
- `chat_model_from_config(cfg)`: LLMConfig / PolicyConfig -> scripted or endpoint model.
- `prompt_config(name)`: the invoke config that names the prompt being asked;
  ScriptedChatModel answers by that name, traces record it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field, ValidationError
from tenacity import (
    AsyncRetrying,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from gapforge.agents.config import ENDPOINT_TEMPERATURE, EndpointConfig, LLMConfig, PolicyConfig
from gapforge.agents.errors import ModelEndpointError, ModelError, StructuredOutputError
from gapforge.agents.scripted import PROMPT_NAME_KEY, ScriptedChatModel
from gapforge.envs.breaker import CircuitBreaker, CircuitOpen, breaker_for
from gapforge.envs.errors import is_transient_status
from gapforge.prompts import load_prompt

PLACEHOLDER_API_KEY = "not-needed"  # local OpenAI-compatible servers ignore the key
# The endpoint's circuit breaker, shared per base URL with the rollout policy's client (serving/openai_policy.py, the
# same values): this many consecutive failed requests mark the endpoint down; calls then fail at once for the cooldown
# (seconds), then one probe.
BREAKER_FAILURES, BREAKER_COOLDOWN_S = 8, 30.0


def prompt_config(prompt_name: str, config: RunnableConfig | None = None) -> RunnableConfig:
    """An invoke config carrying the prompt name in its metadata (merged into `config`)."""
    merged: dict[str, Any] = dict(config or {})
    merged["metadata"] = {**merged.get("metadata", {}), PROMPT_NAME_KEY: prompt_name}
    return merged  # type: ignore[return-value]


def is_transient(exc: BaseException) -> bool:
    """Errors worth another attempt: rate limits, server errors, timeouts, dropped connections."""
    if isinstance(exc, CircuitOpen):
        return exc.probing  # the endpoint's breaker is half-open and another call is probing: retry after the backoff
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, (json.JSONDecodeError, openai.APIResponseValidationError)):
        return True  # a 200 whose body is not a completion: the endpoint's (or a proxy's) fault, never the model's
    if isinstance(exc, openai.APIStatusError):
        return is_transient_status(exc.status_code)
    return False


class RetryingChatOpenAI(ChatOpenAI):
    """ChatOpenAI whose requests are retried by tenacity; every use (tools, structured) goes through it."""

    retry_attempts: int = Field(5, ge=1, description="total attempts per request (1 = no retry)")
    retry_backoff_s: float = Field(
        1.0, ge=0.0, description="first wait; doubles per attempt, plus up to this much jitter"
    )
    retry_max_backoff_s: float = Field(30.0, ge=0.0)
    disable_streaming: bool = True  # streaming would bypass _generate and with it the retries

    @property
    def endpoint_base(self) -> str:
        return self.openai_api_base or "https://api.openai.com/v1"

    def breaker(self) -> CircuitBreaker:
        """The endpoint's breaker, shared by every client of this base URL in the process."""
        return breaker_for(self.endpoint_base, failures=BREAKER_FAILURES, cooldown_s=BREAKER_COOLDOWN_S)

    def _down(self, err: CircuitOpen) -> ModelEndpointError:
        return ModelEndpointError(f"model '{self.model_name}': {_one_line(err)}; check the endpoint is up, then re-run")

    @contextlib.contextmanager
    def _endpoint_errors(self) -> Iterator[None]:
        """The endpoint down (its breaker open) or every attempt failed: one ModelEndpointError line."""
        try:
            yield
        except CircuitOpen as err:
            raise self._down(err) from None
        except RetryError as err:
            raise self._exhausted(err) from err.last_attempt.exception()

    def _retry_args(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.retry_attempts),
            # jitter spreads the retries of many concurrent rollouts hitting the same 429
            "wait": wait_exponential_jitter(
                multiplier=self.retry_backoff_s, max=self.retry_max_backoff_s, jitter=self.retry_backoff_s
            ),
            "retry": retry_if_exception(is_transient),
            "reraise": False,
        }

    def _exhausted(self, err: RetryError) -> ModelEndpointError:
        last = err.last_attempt.exception()
        where = self.openai_api_base or "the OpenAI API"
        return ModelEndpointError(
            f"model '{self.model_name}' at {where} failed {self.retry_attempts} attempt(s), last: "
            f"{type(last).__name__}: {_one_line(last)}; check the endpoint is up or raise max_retries"
        )

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        breaker = self.breaker()
        with self._endpoint_errors():
            for attempt in Retrying(**self._retry_args()):
                with attempt, breaker.attempt(is_transient):
                    return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        breaker = self.breaker()
        with self._endpoint_errors():
            async for attempt in AsyncRetrying(**self._retry_args()):
                with attempt, breaker.attempt(is_transient):
                    return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        raise AssertionError("unreachable: tenacity either returns or raises")


def make_chat_model(
    endpoint: EndpointConfig, *, temperature: float | None = None, retry_backoff_s: float | None = None
) -> BaseChatModel:
    """A chat model against `endpoint` with our retries (endpoint.max_retries) and its timeout."""
    if endpoint.base_url is None and endpoint.api_key is None:
        raise ModelError(
            f"no chat endpoint configured: set {endpoint.key_env} for OpenAI, "
            "or endpoint.base_url (e.g. http://localhost:8000/v1) for a local server"
        )
    key = endpoint.api_key.get_secret_value() if endpoint.api_key is not None else PLACEHOLDER_API_KEY
    # Own HTTP clients per model: langchain-openai otherwise shares one cached async client per
    # base URL across the process, whose pooled connections die with the first event loop that
    # used them (a second asyncio.run then fails with connection errors). Use a model within
    # one event loop. Limits sized for many concurrent rollouts.
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=256)
    return RetryingChatOpenAI(
        http_client=httpx.Client(timeout=endpoint.timeout_s, limits=limits),
        http_async_client=httpx.AsyncClient(timeout=endpoint.timeout_s, limits=limits),
        model=endpoint.model,
        base_url=endpoint.base_url,
        api_key=key,
        timeout=endpoint.timeout_s,
        max_retries=0,
        temperature=ENDPOINT_TEMPERATURE if temperature is None else temperature,
        retry_attempts=endpoint.max_retries + 1,
        retry_backoff_s=endpoint.retry_backoff_s if retry_backoff_s is None else retry_backoff_s,
    )


def chat_model_from_config(cfg: LLMConfig | PolicyConfig, *, section: str = "llm") -> BaseChatModel:
    """The chat model a config section asks for: recorded answers or an OpenAI-compatible endpoint."""
    if cfg.kind == "scripted":
        if not cfg.scripted_path:
            hint = "; to run a model, pass --policy DIR_OR_URL (a local model dir or an endpoint)" * (
                section == "policy"
            )
            raise ModelError(
                f"{section}.kind=scripted needs {section}.scripted_path: a YAML/JSON file of recorded answers{hint}"
            )
        return ScriptedChatModel.from_file(cfg.scripted_path)
    if cfg.kind in ("openai", "endpoint"):
        temperature = getattr(cfg, "temperature", None)  # PolicyConfig has its own sampling temperature
        return make_chat_model(cfg.endpoint, temperature=temperature)
    raise ModelError(f"{section}.kind={cfg.kind} is not a chat model; use a serving backend for it")


# --- structured output -------------------------------------------------------------------------


def _one_line(exc: BaseException | None, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) if exc is not None else "unknown error"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _raw_text(raw: Any) -> str:
    """What the model actually said, as text (content, tool-call arguments)."""
    if not isinstance(raw, AIMessage):
        return "" if raw is None else str(raw)
    parts = [raw.text] if raw.text else []
    parts += [json.dumps(tc["args"]) for tc in raw.tool_calls]
    parts += [str(tc.get("args") or "") for tc in raw.invalid_tool_calls]
    return "\n".join(p for p in parts if p)


def _check_schema(schema: type[BaseModel]) -> None:
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise TypeError(f"structured_call needs a pydantic model class, got {schema!r}")
    if schema.model_config.get("extra") != "forbid":
        raise TypeError(f"{schema.__name__} must set model_config = ConfigDict(extra='forbid')")


def _parse(out: dict[str, Any], schema: type[BaseModel]) -> tuple[BaseModel | None, str]:
    """(parsed, error) from a with_structured_output(include_raw=True) result."""
    parsed, err = out.get("parsed"), out.get("parsing_error")
    if err is None and isinstance(parsed, dict):
        try:
            parsed = schema.model_validate(parsed)
        except ValidationError as e:
            parsed, err = None, e
    if isinstance(parsed, schema) and err is None:
        return parsed, ""
    if err is None:
        raw = out.get("raw")
        invalid = raw.invalid_tool_calls if isinstance(raw, AIMessage) else []
        err = invalid[0].get("error") if invalid else f"no {schema.__name__} object in the answer"
    return None, _describe(err)


def _describe(err: Any) -> str:
    """A parse/validation error as one short line the model (and a user) can act on."""
    if isinstance(err, ValidationError):
        parts = [f"field '{'.'.join(str(p) for p in e['loc']) or '<root>'}': {e['msg']}" for e in err.errors()[:5]]
        return f"{err.title} failed validation: " + "; ".join(parts)
    return _one_line(err if isinstance(err, BaseException) else Exception(err))


def _reask_messages(messages: list[BaseMessage], raw: Any, error: str, schema: type[BaseModel]) -> list[BaseMessage]:
    template = load_prompt("structured_reask.md").body
    return [
        *messages,
        AIMessage(content=_raw_text(raw)),
        HumanMessage(content=template.format(error=error, schema=schema.__name__)),
    ]


def _structured(model: BaseChatModel, schema: type[BaseModel], method: str | None) -> Any:
    _check_schema(schema)
    kwargs = {"method": method} if method else {}
    return model.with_structured_output(schema, include_raw=True, **kwargs)


def _failed(err: ValidationError | OutputParserException) -> dict[str, Any]:
    """A parse error raised by the model call itself (ChatOpenAI's json_schema method parses in
    the client) in the shape of an include_raw result, with the raw text when the error holds it."""
    raw = getattr(err, "llm_output", None)
    if isinstance(err, ValidationError):
        inputs = [e.get("input") for e in err.errors()]
        raw = next((i for i in inputs if isinstance(i, str)), None)
    return {"raw": raw, "parsed": None, "parsing_error": err}


def _give_up(schema: type[BaseModel], first: str, second: str) -> StructuredOutputError:
    return StructuredOutputError(
        f"the model returned malformed {schema.__name__} output twice (first: {first}; then: {second}); "
        "use a stronger model or check the prompt"
    )


def _parse_again(out: dict[str, Any], schema: type[BaseModel], first: str) -> BaseModel:
    """The re-asked answer, parsed; still malformed: StructuredOutputError naming both failures."""
    parsed, second = _parse(out, schema)
    if parsed is None:
        raise _give_up(schema, first, second)
    return parsed


def _run(runnable: Any, messages: list[BaseMessage], cfg: RunnableConfig | None) -> dict[str, Any]:
    try:
        return runnable.invoke(messages, cfg)
    except (ValidationError, OutputParserException) as e:
        return _failed(e)


async def _arun(runnable: Any, messages: list[BaseMessage], cfg: RunnableConfig | None) -> dict[str, Any]:
    try:
        return await runnable.ainvoke(messages, cfg)
    except (ValidationError, OutputParserException) as e:
        return _failed(e)


def structured_call(
    model: BaseChatModel,
    messages: list[BaseMessage],
    schema: type[BaseModel],
    *,
    prompt_name: str | None = None,
    method: str | None = None,
    config: RunnableConfig | None = None,
) -> BaseModel:
    """Ask for a `schema` object; re-ask once with the parse error; StructuredOutputError if still bad."""
    runnable, cfg = _structured(model, schema, method), prompt_config(prompt_name, config) if prompt_name else config
    out = _run(runnable, messages, cfg)
    parsed, first = _parse(out, schema)
    if parsed is not None:
        return parsed
    return _parse_again(_run(runnable, _reask_messages(messages, out.get("raw"), first, schema), cfg), schema, first)


async def astructured_call(
    model: BaseChatModel,
    messages: list[BaseMessage],
    schema: type[BaseModel],
    *,
    prompt_name: str | None = None,
    method: str | None = None,
    config: RunnableConfig | None = None,
) -> BaseModel:
    """Async `structured_call`."""
    runnable, cfg = _structured(model, schema, method), prompt_config(prompt_name, config) if prompt_name else config
    out = await _arun(runnable, messages, cfg)
    parsed, first = _parse(out, schema)
    if parsed is not None:
        return parsed
    reasked = await _arun(runnable, _reask_messages(messages, out.get("raw"), first, schema), cfg)
    return _parse_again(reasked, schema, first)
