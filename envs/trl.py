"""A TRL environment as a gapforge target: `trl:path/to/file.py:Class?rows=FILE.jsonl` (or `trl:package.module:Class
?rows=...`), the class TRL's GRPOTrainer takes as `environment_factory`, with the dataset rows it trains on.

TRL's contract (trl 1.16, experimental there) and how each part maps:

- a dataset row (`prompt`: messages or a string, other fields) -> a task: id `row["task_id"]` or `row-N` (line N),
  family `row["family"]` or `default`;
- `reset(**row)` -> None or text appended to the prompt's last message -> `reset(task)`: the prompt's messages with
  that text appended;
- public methods (type hints, Google docstring) are the tools -> `tools()`: their schemas, built as TRL builds them
  (transformers' `get_json_schema`);
- a tool call runs the method, its return value (str) is the tool message -> `step`: one tool message per call, an
  exception shown as `Error: ...`;
- the first text turn ends the rollout -> a text turn ends the episode (`done`), and nobody answers it;
- `get_reward()` after the rollout -> `score()`: its value clipped to [0, 1], success at >= 0.999 (a class without
  get_reward is refused).

What the mapping loses: TRL envs have no user turns and no task families, and their reward never sees the final text
turn (TRL does not pass it to the env). The class runs in this process, unsandboxed, like any user env class.
"""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef
from gapforge.faults import EnvCodeFault

PREFIX = "trl:"
SUCCESS = 0.999
RESERVED = ("reset", "get_reward")


class TRLEnvCodeError(EnvCodeFault, RuntimeError):
    """The TRL env's own code raised (constructor, reset, get_reward): blamed on that code (exit 4)."""


def tool_methods(cls: type) -> list[str]:
    """The tool names TRL finds on an env class: its public functions but reset and get_reward."""
    return [
        n
        for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if n not in RESERVED and not n.startswith("_")
    ]


def read_rows(path: Path, spec: str) -> list[dict[str, Any]]:
    """The JSONL rows (one JSON object per line, each with a `prompt`); EnvError naming the line otherwise."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise EnvError(f"env '{spec}': rows file {path} cannot be read ({e.strerror}): fix ?rows=FILE") from None
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise EnvError(f"env '{spec}': {path} line {i} is not JSON ({e})") from None
        if not isinstance(row, dict) or "prompt" not in row:
            raise EnvError(f"env '{spec}': {path} line {i} has no 'prompt': each row is TRL's dataset row")
        rows.append(row)
    if not rows:
        raise EnvError(f"env '{spec}': {path} holds no rows")
    return rows


class TRLTargetEnv:
    """A TRL env class and its dataset rows, played as a gapforge target (module doc)."""

    def __init__(self, spec: str, cls: type, rows: list[dict[str, Any]]) -> None:
        if not callable(getattr(cls, "reset", None)) or not callable(getattr(cls, "get_reward", None)):
            raise EnvError(
                f"env '{spec}': {cls.__name__} needs reset(**row) and get_reward() (TRL's environment_factory contract)"
            )
        self.name, self._cls, self._rows = spec, cls, rows
        ids = [str(r.get("task_id", f"row-{i}")) for i, r in enumerate(rows)]
        if len(set(ids)) != len(ids):
            raise EnvError(f"env '{spec}': two rows share a task_id: make them unique")
        self._by_id = dict(zip(ids, rows))
        self._tools = set(tool_methods(cls))
        self._env: Any = None
        self._schemas: list[dict[str, Any]] | None = None
        self.done = False

    def task_ids(self) -> list[str]:
        return list(self._by_id)

    def task_family(self, task_id: str) -> str:
        return str(self._by_id[task_id].get("family", "default"))

    def _instance(self) -> Any:
        if self._env is None:
            try:
                self._env = self._cls()
            except Exception as e:
                raise TRLEnvCodeError(
                    f"env '{self.name}': {self._cls.__name__}() raised {type(e).__name__}: {e}"
                ) from None
        return self._env

    def tools(self) -> list[dict[str, Any]]:
        if self._schemas is None:
            from transformers.utils import get_json_schema

            env = self._instance()
            try:
                self._schemas = [get_json_schema(getattr(env, n)) for n in tool_methods(self._cls)]
            except Exception as e:  # a method without type hints or an Args: docstring: TRL would refuse it too
                raise EnvError(f"env '{self.name}': a tool method does not describe itself ({e})") from None
        return copy.deepcopy(self._schemas)

    def reset(self, task: TaskRef) -> list[Message]:
        row = self._by_id.get(str(task))
        if row is None:
            raise EnvError(f"env '{self.name}': unknown task {task!r}")
        env, self.done = self._instance(), False
        try:
            extra = env.reset(**copy.deepcopy(row))
        except Exception as e:
            raise TRLEnvCodeError(f"env '{self.name}': reset raised {type(e).__name__}: {e}") from None
        prompt = row["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else copy.deepcopy(prompt)
        if isinstance(extra, str) and messages:
            messages[-1]["content"] = (messages[-1].get("content") or "") + extra
        return [Message(role=m["role"], content=m.get("content")) for m in messages]

    def step(self, message: Message) -> StepResult:
        if not message.tool_calls:  # TRL: the first text turn ends the rollout, unanswered
            self.done = True
            return StepResult(done=True, info={"reason": "text_turn"})
        env, out = self._instance(), []
        for call in message.tool_calls:
            if call.name not in self._tools:
                content = f"Error: unknown tool {call.name!r}"
            else:
                try:
                    content = str(getattr(env, call.name)(**call.arguments))
                except Exception as e:  # the env's tool raised: the model sees it, as in TRL's loop
                    content = f"Error: {type(e).__name__}: {e}"
            out.append(Message.tool(call.id, content, name=call.name))
        return StepResult(messages=out)

    def score(self) -> Score:
        try:
            value = float(self._instance().get_reward())
        except Exception as e:
            raise TRLEnvCodeError(f"env '{self.name}': get_reward raised {type(e).__name__}: {e}") from None
        reward = min(1.0, max(0.0, value))
        return Score(reward=reward, success=reward >= SUCCESS, info={"get_reward": value})

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None and callable(getattr(env, "close", None)):
            env.close()


def make_trl_env(spec: str) -> TRLTargetEnv:
    """`trl:LOCATION:Class?rows=FILE.jsonl` -> the target (the class loaded as envs.loader loads a user's class)."""
    from gapforge.envs.loader import load_class, parse_class_spec

    rest = spec.removeprefix(PREFIX)
    cs = parse_class_spec(rest)
    rows = cs.kwargs.get("rows")
    if not isinstance(rows, str) or set(cs.kwargs) != {"rows"}:
        raise EnvError(
            f"env '{spec}': give the dataset rows and nothing else, e.g. trl:my_env.py:MyEnv?rows=rows.jsonl"
        )
    cls = load_class(cs.model_copy(update={"raw": spec, "kwargs": {}}))
    return TRLTargetEnv(spec, cls, read_rows(Path(rows), spec))
