"""ScriptedChatModel: a chat model returning recorded answers, for tests and the offline demo (docs/recordings.md).

Answers are keyed by *prompt name*, named in the invoke config's metadata (`agents.llm.prompt_config(name)`:
`config={"metadata": {"prompt_name": "discover"}}`; chains such as `with_structured_output` pass it down), else
`default_prompt`. A script maps each prompt name to a list of answers consumed in order (running out -> ModelError
naming the prompt), `{"repeat": answer}`, or a rule `(messages, tools) -> answer` (Python only) asked on every call.
An answer is a string (plain text), an AIMessage, a rule, or a mapping (`ScriptedAnswer`): `content`, `tool_calls`
(`[{name, arguments, id}]`; arguments as a string = raw JSON, may be broken), `structured` (the object of a
structured call; a string = raw JSON). Files (`from_file`) are YAML or JSON with the prompt names at the top level.

Per-task scripts (a scripted policy): the reserved top-level key `tasks` maps task ids to a list or
`{repeat: answer}` answering the prompt `task_prompt` ("policy") in that task's episodes; every other task takes the
shared list under the prompt's own name. The current episode is `gapforge.envs.sampling.episode_key`
("<task>#<sample>"). Each episode of a listed task starts at the head of its task's list, so sample k replays the same
script; the shared list is consumed by all tasks together, in the order the calls arrive.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from gapforge.agents.errors import ModelError
from gapforge.envs.sampling import episode_key

PROMPT_NAME_KEY = "prompt_name"
TASKS_KEY = "tasks"  # the reserved top-level key of per-task scripts

Rule = Callable[[list[BaseMessage], list[dict[str, Any]]], Any]


class ScriptedToolCall(BaseModel):
    """One tool call of a scripted answer."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the tool's name, as the env's tools() give it")
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="the arguments; a string is raw JSON, sent as is (may be broken)"
    )
    id: str | None = Field(None, description="the call id; made up when left out")


class ScriptedAnswer(BaseModel):
    """One recorded answer as a mapping (a plain string is the same as `content:` alone)."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field("", description="the assistant's text")
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list, description="tool calls, in order")
    structured: dict[str, Any] | str | None = Field(
        None,
        description="the object a structured call asks for (the analyst's answers); a string is raw JSON (may be broken)",
    )


def _answer(spec: Any, where: str) -> ScriptedAnswer | AIMessage | Rule:
    if isinstance(spec, (ScriptedAnswer, AIMessage)) or callable(spec):
        return spec
    if isinstance(spec, str):
        return ScriptedAnswer(content=spec)
    if isinstance(spec, dict):
        try:
            return ScriptedAnswer.model_validate(spec)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ModelError(f"scripted answer {where}: field '{loc}': {first['msg']}") from None
    raise ModelError(f"scripted answer {where}: expected text, a mapping or a rule, got {type(spec).__name__}")


def _entry(entry: Any, where: str) -> list[Any] | tuple[str, Any]:
    """One script: a list of answers, ("repeat", answer) or ("rule", callable)."""
    if isinstance(entry, list):
        return [_answer(a, f"#{i} {where}") for i, a in enumerate(entry)]
    if isinstance(entry, dict) and set(entry) == {"repeat"}:
        return ("repeat", _answer(entry["repeat"], where))
    if callable(entry):
        return ("rule", entry)
    raise ModelError(f"scripted answers {where}: expected a list, {{repeat: answer}} or a rule")


class ScriptedChatModel(BaseChatModel):
    """Recorded answers keyed by prompt name; see the module docstring for the format."""

    answers: dict[str, Any] = Field(default_factory=dict)
    default_prompt: str | None = None
    source: str = "<dict>"
    task_prompt: str = "policy"  # the prompt that the per-task scripts under `tasks` answer

    _script: dict[str, list[Any] | tuple[str, Any]] = PrivateAttr(default_factory=dict)
    _tasks: dict[str, list[Any] | tuple[str, Any]] = PrivateAttr(default_factory=dict)
    _used: dict[str, int] = PrivateAttr(default_factory=dict)  # position in each shared list
    _given: dict[str, int] = PrivateAttr(default_factory=dict)  # answers given per prompt, per-task ones included
    _episode_used: dict[str, int] = PrivateAttr(default_factory=dict)  # position in its task's script, per episode key
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any) -> None:
        for name, entry in self.answers.items():
            if name == TASKS_KEY:
                if not isinstance(entry, dict):
                    raise ModelError(
                        f"scripted answers in {self.source}: '{TASKS_KEY}' must map task ids to answer lists"
                    )
                self._tasks = {str(t): _entry(e, f"for task '{t}' in {self.source}") for t, e in entry.items()}
            else:
                self._script[name] = _entry(entry, f"for prompt '{name}' in {self.source}")

    @classmethod
    def from_dict(
        cls, answers: dict[str, Any], *, default_prompt: str | None = None, source: str = "<dict>"
    ) -> "ScriptedChatModel":
        return cls(answers=answers, default_prompt=default_prompt, source=source)

    @classmethod
    def from_file(cls, path: str | Path, *, default_prompt: str | None = None) -> "ScriptedChatModel":
        p = Path(path)
        if not p.is_file():
            raise ModelError(f"scripted answers file '{p}' not found: point scripted_path at a YAML/JSON file")
        try:
            data = yaml.safe_load(p.read_text())  # YAML is a superset of JSON
        except yaml.YAMLError:
            raise ModelError(f"scripted answers file '{p}' is not valid YAML/JSON: fix the syntax") from None
        if not isinstance(data, dict):
            raise ModelError(f"scripted answers file '{p}' must map prompt names to answers at the top level")
        return cls.from_dict(data, default_prompt=default_prompt, source=str(p))

    @property
    def _llm_type(self) -> str:
        return "gapforge-scripted"

    def used(self, prompt_name: str) -> int:
        """How many answers were given for `prompt_name` so far (per-task answers included)."""
        return self._given.get(prompt_name, 0)

    def answers_prompt(self, prompt_name: str) -> bool:
        """Whether the script holds answers for `prompt_name`: its own entry, or per-task scripts for `task_prompt`."""
        return prompt_name in self._script or (prompt_name == self.task_prompt and bool(self._tasks))

    def task_script(self, name: str) -> tuple[str, list[Any] | tuple[str, Any]] | None:
        """(episode key, the task's script) when prompt `name` is asked inside an episode whose task has a script."""
        key = episode_key.get()
        if name != self.task_prompt or not self._tasks or not key or "#" not in key:
            return None
        entry = self._tasks.get(key.rpartition("#")[0])
        return (key, entry) if entry is not None else None

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _prompt_name(self, run_manager: Any) -> str:
        metadata = getattr(run_manager, "metadata", None) or {}
        name = metadata.get(PROMPT_NAME_KEY) or self.default_prompt
        if not name:
            raise ModelError(
                "scripted model called without a prompt name: invoke with "
                "config={'metadata': {'prompt_name': ...}} (agents.llm.prompt_config) or set default_prompt"
            )
        return name

    def _next(self, name: str, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> Any:
        own = self.task_script(name)
        if own is None and name not in self._script:
            known = ", ".join(sorted(self._script)) or "none"
            if name == self.task_prompt and self._tasks:
                raise ModelError(
                    f"scripted answers in {self.source} have no script for the task of episode '{episode_key.get()}' "
                    f"and no shared '{name}' list: add the task under '{TASKS_KEY}', or a '{name}' list"
                )
            raise ModelError(
                f"scripted model has no answers for prompt '{name}' (known: {known}); add them to {self.source}"
            )
        entry = own[1] if own is not None else self._script[name]
        counts, count_key = (self._episode_used, own[0]) if own is not None else (self._used, name)
        with self._lock:
            if own is not None and not any(isinstance(m, AIMessage) for m in messages):
                counts[count_key] = 0  # the episode's first call: a replay of the same episode starts over
            n = counts.get(count_key, 0)
            if isinstance(entry, list) and n >= len(entry):
                where = (
                    f"task '{own[0].rpartition('#')[0]}' (episode '{own[0]}')"
                    if own is not None
                    else f"prompt '{name}'"
                )
                raise ModelError(f"scripted model ran out of answers for {where} after {n}; add more to {self.source}")
            counts[count_key] = n + 1
            self._given[name] = self._given.get(name, 0) + 1
        spec = entry[n] if isinstance(entry, list) else entry[1]
        while callable(spec) and not isinstance(spec, (ScriptedAnswer, AIMessage)):
            spec = _answer(spec(messages, tools), f"from the rule for prompt '{name}'")
        return spec

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        name = self._prompt_name(run_manager)
        tools = list(kwargs.get("tools") or [])
        spec = self._next(name, messages, tools)
        message = spec if isinstance(spec, AIMessage) else _to_message(spec, name, self.used(name), tools)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return self._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _call(
    name: str, arguments: dict[str, Any] | str, call_id: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(tool_call, None) or (None, invalid_tool_call) for raw arguments that are not a JSON object."""
    if isinstance(arguments, dict):
        return {"name": name, "args": arguments, "id": call_id, "type": "tool_call"}, None
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as e:
        error = f"arguments are not valid JSON: {e}"
    else:
        if isinstance(parsed, dict):
            return {"name": name, "args": parsed, "id": call_id, "type": "tool_call"}, None
        error = "arguments are not a JSON object"
    return None, {"name": name, "args": arguments, "id": call_id, "error": error, "type": "invalid_tool_call"}


def _to_message(answer: ScriptedAnswer, prompt: str, turn: int, tools: list[dict[str, Any]]) -> AIMessage:
    calls = [(tc.name, tc.arguments, tc.id or f"call_{prompt}_{turn}_{i}") for i, tc in enumerate(answer.tool_calls)]
    content = answer.content
    if answer.structured is not None:
        if len(tools) == 1:  # with_structured_output binds exactly the schema as a tool
            calls.append((tools[0]["function"]["name"], answer.structured, f"call_{prompt}_{turn}_s"))
        elif not tools:
            content = answer.structured if isinstance(answer.structured, str) else json.dumps(answer.structured)
        else:
            raise ModelError(
                f"scripted structured answer for prompt '{prompt}' but {len(tools)} tools are bound; expected one schema"
            )
    valid, invalid = [], []
    for name, arguments, call_id in calls:
        ok, bad = _call(name, arguments, call_id)
        (valid if ok else invalid).append(ok or bad)
    return AIMessage(content=content, tool_calls=valid, invalid_tool_calls=invalid)
