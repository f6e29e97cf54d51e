"""The policy loop: drive a PolicyModel through an Environment until done or a turn limit.

`run_episode(policy, env, task)` returns an `Episode` (messages, reward, success,
components, turns, termination reason, timings). A bad rollout is data: policy
failures (envs.errors.PolicyError: endpoint down after retries, malformed output)
and unexpected exceptions inside `env.step` end the episode with that reason,
and the episode is still scored. Only `env.reset` raising envs.errors.EnvError
(unknown task: user input) and user-fixable model errors (agents.errors.ModelError,
e.g. a scripted model out of answers) propagate. The caller owns the env's
lifecycle: run_episode never calls `env.close()`.

`ChatModelPolicy` implements envs.protocol.PolicyModel over any LangChain chat
model (agents.llm.make_chat_model, ScriptedChatModel, ...). Scripted answers for
it are keyed by its `prompt_name` (default "policy").
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any, Literal

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field

from agents.errors import ModelEndpointError, ModelError
from agents.llm import is_transient, prompt_config
from envs.errors import EndpointError, EnvError, MalformedOutputError, PolicyError
from envs.protocol import Environment, Message, PolicyModel, TaskRef, ToolCall

Termination = Literal["done", "max_turns", "endpoint_error", "malformed_output", "policy_error", "env_error"]


# --- message conversion ------------------------------------------------------------------------


def to_langchain(messages: list[Message]) -> list[BaseMessage]:
    """Our OpenAI-format messages -> LangChain messages (tool calls and tool results included)."""
    out: list[BaseMessage] = []
    for m in messages:
        if m.role == "system":
            out.append(SystemMessage(content=m.content or ""))
        elif m.role == "user":
            out.append(HumanMessage(content=m.content or ""))
        elif m.role == "assistant":
            calls = [{"name": tc.name, "args": tc.arguments, "id": tc.id, "type": "tool_call"} for tc in m.tool_calls]
            out.append(AIMessage(content=m.content or "", tool_calls=calls))
        else:
            out.append(ToolMessage(content=m.content or "", tool_call_id=m.tool_call_id or "", name=m.name))
    return out


def from_langchain(ai: BaseMessage, *, call_prefix: str = "call") -> Message:
    """A LangChain assistant message -> our Message; unparseable tool calls -> MalformedOutputError."""
    if not isinstance(ai, AIMessage):
        raise PolicyError(f"the chat model returned a {type(ai).__name__}, expected an assistant message")
    text = ai.text
    if ai.invalid_tool_calls:
        bad = ai.invalid_tool_calls[0]
        raw = "\n".join(filter(None, [text, *(str(tc.get("args") or "") for tc in ai.invalid_tool_calls)]))
        raise MalformedOutputError(f"invalid tool call '{bad.get('name')}': {bad.get('error') or 'arguments are not valid JSON'}", raw=raw)
    calls = [
        ToolCall(id=tc.get("id") or f"{call_prefix}_{i}", name=tc["name"], arguments=dict(tc["args"]))
        for i, tc in enumerate(ai.tool_calls)
    ]
    return Message.assistant(content=text or (None if calls else ""), tool_calls=calls)


# --- the policy over a chat model --------------------------------------------------------------


class ChatModelPolicy:
    """envs.protocol.PolicyModel over a LangChain chat model (tools bound per call)."""

    def __init__(self, chat_model: BaseChatModel, name: str, *, prompt_name: str = "policy") -> None:
        self.chat_model = chat_model
        self.name = name
        self.prompt_name = prompt_name

    def _runnable(self, tools: list[dict[str, Any]], temperature: float | None) -> Any:
        kwargs = {"temperature": temperature} if temperature is not None else {}
        if tools:
            return self.chat_model.bind_tools(tools, **kwargs)
        return self.chat_model.bind(**kwargs) if kwargs else self.chat_model

    async def respond(self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None) -> Message:
        runnable = self._runnable(tools, temperature)
        try:
            ai = await runnable.ainvoke(to_langchain(messages), prompt_config(self.prompt_name))
        except ModelEndpointError as e:
            raise EndpointError(str(e)) from e
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
            raise ModelError(f"policy '{self.name}': the endpoint refused the request ({e.status_code}): check the API key and model name") from e
        except openai.APIError as e:
            if is_transient(e):  # a chat model without our retry wrapper
                raise EndpointError(f"policy '{self.name}': {type(e).__name__}: {e}") from e
            raise PolicyError(f"policy '{self.name}': the endpoint rejected the request: {type(e).__name__}: {e}") from e
        return from_langchain(ai, call_prefix=f"call_{len(messages)}")


# --- the episode -------------------------------------------------------------------------------


class Episode(BaseModel):
    """One policy run on one task: the trajectory, its score and why it ended."""

    model_config = ConfigDict(extra="forbid")

    env: str
    task: str | int
    policy: str
    messages: list[Message]
    reward: float = Field(ge=0.0, le=1.0)
    success: bool
    components: dict[str, float] = Field(default_factory=dict)
    score_info: dict[str, Any] = Field(default_factory=dict)
    turns: int = Field(ge=0, description="assistant messages the policy produced")
    termination: Termination
    error: str | None = None
    timings: dict[str, float] = Field(description="policy_s, env_s, total_s")
    started_at: datetime

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [tc for m in self.messages if m.role == "assistant" for tc in m.tool_calls]


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def run_episode(
    policy: PolicyModel, env: Environment, task: TaskRef, *, max_turns: int = 30, temperature: float | None = None
) -> Episode:
    """Reset, then policy.respond -> env.step until done or `max_turns`, then score."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    started_at = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    clock = {"policy_s": 0.0, "env_s": 0.0}

    inline = getattr(env, "inline", False) is True  # fast CPU-only envs skip the worker-thread hop

    async def env_call(fn: Any, *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args) if inline else await asyncio.to_thread(fn, *args)
        finally:
            clock["env_s"] += time.perf_counter() - t

    messages: list[Message] = []
    turns = 0
    termination: Termination = "max_turns"
    error: str | None = None
    try:
        messages = list(await env_call(env.reset, task))  # EnvError (bad task) propagates
        tools = await env_call(env.tools)
    except EnvError:
        raise
    except Exception as e:
        termination, error = "env_error", f"env.reset failed: {_text(e)}"
    else:
        while turns < max_turns:
            t = time.perf_counter()
            try:
                reply = await policy.respond(messages, tools, temperature=temperature)
            except PolicyError as e:
                termination, error = e.termination, str(e)  # type: ignore[assignment]
                if isinstance(e, MalformedOutputError) and e.raw:
                    messages.append(Message.assistant(content=e.raw))  # what the model said, for analysis
                break
            finally:
                clock["policy_s"] += time.perf_counter() - t
            messages.append(reply)
            turns += 1
            try:
                result = await env_call(env.step, reply)
            except Exception as e:
                termination, error = "env_error", f"env.step failed: {_text(e)}"
                break
            messages.extend(result.messages)
            if result.done:
                termination = "done"
                break

    reward, success, components, score_info = 0.0, False, {}, {}
    try:
        score = await env_call(env.score)
        reward, success, components, score_info = score.reward, score.success, dict(score.components), dict(score.info)
    except Exception as e:
        score_info = {"score_error": _text(e)}
        error = f"{error}; " if error else ""
        error += f"env.score failed, reward recorded as 0.0: {_text(e)}"

    clock["total_s"] = time.perf_counter() - t0
    return Episode(
        env=env.name, task=task, policy=policy.name, messages=messages, reward=reward, success=success,
        components=components, score_info=score_info, turns=turns, termination=termination, error=error,
        timings=clock, started_at=started_at,
    )
