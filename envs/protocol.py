"""The one Environment protocol (target, synthetic, validation, training and evaluation envs) and its message
types: the OpenAI chat format, tool calls with parsed arguments (`to_openai()` renders them as a JSON string)."""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from gapforge.envs.sdk import function_schema

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One function call emitted by the assistant."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


class Message(BaseModel):
    """One chat message: system / user / assistant (maybe with tool calls) / tool result."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None  # set on role == "tool"
    name: str | None = None  # tool name on role == "tool"
    # the assistant's <think> reasoning as written (envs ignore it; serving.chat_format renders it back); not dumped when None
    reasoning: str | None = None

    @model_serializer(mode="wrap")
    def _without_empty_reasoning(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if out.get("reasoning") is None:
            out.pop("reasoning", None)
        return out

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
        return out

    @classmethod
    def system(cls, content: str) -> "Message":
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> "Message":
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str | None = None, tool_calls: list[ToolCall] | None = None) -> "Message":
        return cls(role="assistant", content=content, tool_calls=tool_calls or [])

    @classmethod
    def tool(cls, tool_call_id: str, content: str, name: str | None = None) -> "Message":
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)


class StepResult(BaseModel):
    """What the environment answers to one assistant message."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Message] = Field(default_factory=list)  # tool results and/or the user's reply
    done: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class Score(BaseModel):
    """Reward in [0, 1], the binary success label and named reward components."""

    model_config = ConfigDict(extra="forbid")

    reward: float = Field(ge=0.0, le=1.0)
    success: bool
    components: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)  # e.g. which evaluator decided


TaskRef = str | int  # a task id for target envs, an integer seed for synthetic ones


@runtime_checkable
class Environment(Protocol):
    """The contract every environment implements.

    `reset(task)` starts an episode and returns the initial messages (system prompt with the policy, the first user
    turn); `step(message)` takes one assistant message and returns what follows; `score()` scores the episode so far
    (at any time); `close()` releases resources.

    Optional `inline: bool` (default False): True promises every call is fast and CPU-only, so the policy loop calls
    it on the event loop instead of a worker thread (the hop costs more than such a call under load;
    bench/rollout_concurrency.py). Optional `done: bool`: the episode is over; an env whose episode can end inside
    `reset` (τ²: the user stops at once, or max_steps=1) provides it, and the loop then scores without the policy.
    """

    name: str

    def tools(self) -> list[dict[str, Any]]: ...

    def reset(self, task: TaskRef) -> list[Message]: ...

    def step(self, message: Message) -> StepResult: ...

    def score(self) -> Score: ...

    def close(self) -> None: ...


@runtime_checkable
class TargetEnvironment(Environment, Protocol):
    """A target environment also lists its tasks (and their families)."""

    def task_ids(self) -> list[str]: ...

    def task_family(self, task_id: str) -> str: ...


def returned(call: str, value: Any) -> Any:
    """What `env.<call>` returned, checked: reset a list of Message, step a StepResult, score a Score. Anything else is
    the env's code's fault, said as such (TypeError), not an AttributeError deep in the episode loop or a training job."""
    if call == "reset":
        if isinstance(value, (list, tuple)) and all(isinstance(m, Message) for m in value):
            return list(value)
        wanted = "a list of Message"
    else:
        kind = StepResult if call == "step" else Score
        if isinstance(value, kind):
            return value
        wanted = f"a {kind.__name__}"
    raise TypeError(f"env.{call} returned {type(value).__name__}, not {wanted} (gapforge.envs.protocol)")


def tool_schema(
    name: str, description: str, properties: dict[str, Any], required: list[str] | None = None
) -> dict[str, Any]:
    """Build an OpenAI function-tool schema (every property required unless `required` says otherwise)."""
    return function_schema(name, description, properties, list(required if required is not None else properties))


@runtime_checkable
class PolicyModel(Protocol):
    """The agent side: anything that answers a conversation with one assistant message (agents.policy.ChatModelPolicy,
    serving.local.LocalPolicy). Failures raise envs.errors.PolicyError subclasses, which the policy loop records as the
    episode's end. `aclose()` releases what it holds (HTTP sessions belong to the event loop that used them): whoever
    creates a policy closes it; code handed one (the rollout collector, the readiness check) never does.
    """

    name: str

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message: ...

    async def aclose(self) -> None: ...


def seed_of(task: TaskRef) -> int:
    """The integer seed a synthetic env is reset with: an int, or a string of digits
    (task ids travel as strings through the store). Anything else -> EnvError."""
    from gapforge.envs.errors import EnvError

    if isinstance(task, str) and task.lstrip("-").isdigit():
        return int(task)
    if not isinstance(task, int) or isinstance(task, bool):
        raise EnvError(f"a synthetic env is reset with an integer seed, got {task!r}")
    return task


USER_TOKENS = (
    "user_tokens"  # Score.info key: [prompt, completion] tokens an LLM user simulator spent (gapforge.pricing)
)


def add_usage(tokens: list[int], message: Any) -> None:
    """Add a chat model answer's reported usage (LangChain `usage_metadata`) to `tokens` ([prompt, completion])."""
    meta = getattr(message, "usage_metadata", None) or {}
    tokens[0] += int(meta.get("input_tokens") or 0)
    tokens[1] += int(meta.get("output_tokens") or 0)


def user_tokens(score_infos: Any) -> tuple[int, int]:
    """The user simulator's tokens over episodes' score infos (0, 0 where a scripted user answered)."""
    prompt = completion = 0
    for info in score_infos:
        p, c = (info or {}).get(USER_TOKENS) or (0, 0)
        prompt, completion = prompt + int(p), completion + int(c)
    return prompt, completion
