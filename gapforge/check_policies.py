"""The scripted policies of `gapforge env check` (gapforge/env_check.py): the three degenerate ones, and the replay of a
gold file (`--gold FILE`: a scripted solution per task of a target env).

Degenerate (`make_policy(kind, task)`): `do_nothing` says the self-test's do-nothing text (sandbox/checks/
adversarial.py) every turn; `random_tool` makes one call of a random tool with schema-valid random arguments (the
self-test's random-tool move, `random_call`, seeded by the task id), then says that text every turn; `claim_success`
says `CLAIM` every turn. None of them looks at the task.

The gold file (YAML or JSON; a `.json` file is read as JSON, anything else as YAML) maps a task id to the agent's turns,
in order. A turn is the assistant's text (a string) or a mapping

    {content: "text", tool_calls: [{name: TOOL, arguments: {...}}]}     # content optional, tool_calls optional

with at least one of the two. Between turns the env answers as in any episode (tool results, its user's reply). Checked
against the env before any episode runs: every task id is one of the env's, every tool one it offers, and the structure
above (pydantic, unknown keys refused); anything wrong is one line naming the task, exit 2. Its replay
(`make_policy("gold", task, turns)`) plays the turns in order; the caller ends the episode after the last.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, model_validator

from gapforge.envs.errors import PolicyError
from gapforge.envs.protocol import Message, ToolCall
from gapforge.errors import UsageError
from gapforge.sandbox.checks.adversarial import DO_NOTHING, random_call, usable_tools
from gapforge.sandbox.checks.probe import action_message

DEGENERATE = ("do_nothing", "random_tool", "claim_success")
CLAIM = "Done: I have completed your request."
Move = Callable[[int, list[Message], list[dict[str, Any]]], Message]


class GoldCall(BaseModel):
    """One tool call of a gold turn."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class GoldTurn(BaseModel):
    """One assistant turn: text, tool calls, or both (a bare string in the file is the text)."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    tool_calls: list[GoldCall] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _text_turn(cls, data: Any) -> Any:
        return {"content": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _not_empty(self) -> GoldTurn:
        if not self.content and not self.tool_calls:
            raise ValueError("a turn needs content or tool_calls")
        return self


class GoldFile(RootModel[dict[str, Annotated[list[GoldTurn], Field(min_length=1)]]]):
    """The whole file: task id -> its turns (at least one)."""


def load_gold(path: Path, task_ids: list[str], tool_names: list[str]) -> dict[str, list[GoldTurn]]:
    """Read and check a gold file against the env's task ids and tool names; UsageError (one line) when it is wrong."""
    where = f"gold file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{where} not found: give the path of a YAML or JSON file (task id -> turns)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{where} cannot be read: {e}") from None
    kind = "JSON" if Path(path).suffix.lower() == ".json" else "YAML"
    try:
        raw = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise UsageError(f"{where} is not valid {kind}: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(raw, dict) or not raw:
        raise UsageError(f"{where}: expected a mapping task id -> list of turns, got {type(raw).__name__}")
    raw = {str(k): v for k, v in raw.items()}  # YAML reads `12:` as an int; task ids are strings
    unknown = [t for t in raw if t not in set(task_ids)]
    if unknown:
        raise UsageError(
            f"{where}: task {unknown[0]!r} is not a task of the env ({len(task_ids)} tasks: list them with "
            "`gapforge rollouts tasks ENV`)"
        )
    try:
        gold = GoldFile.model_validate(raw).root
    except ValidationError as e:
        raise UsageError(f"{where}: {_first_problem(e)}") from None
    offered = set(tool_names)
    for task, turns in gold.items():
        for i, turn in enumerate(turns, 1):
            for call in turn.tool_calls:
                if call.name not in offered:
                    raise UsageError(
                        f"{where}: task {task!r}, turn {i}: tool {call.name!r} is not one of the env's tools "
                        f"({', '.join(sorted(offered))})"
                    )
    return gold


def _first_problem(e: ValidationError) -> str:
    """The first validation error as 'task 'x', turn N: field: message'."""
    err = e.errors()[0]
    loc = list(err["loc"])
    parts = [f"task {loc.pop(0)!r}"] if loc else []
    if loc and isinstance(loc[0], int):
        parts.append(f"turn {loc.pop(0) + 1}")
    field = ".".join(str(p) for p in loc)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "too_short":
        msg = "the script is empty: give at least one turn"
    return ", ".join(parts) + ": " + (f"{field}: " if field else "") + msg


def turn_message(turn: GoldTurn, turn_index: int) -> Message:
    """A gold turn as the assistant message that plays it (call ids gold_<turn>_<n>, unique in the episode)."""
    calls = [
        ToolCall(id=f"gold_{turn_index}_{n}", name=c.name, arguments=c.arguments) for n, c in enumerate(turn.tool_calls)
    ]
    return Message.assistant(turn.content, calls)


def calls_no_tool(turns: list[GoldTurn]) -> bool:
    """A script that calls no tool: the task's right answer changes nothing, so a policy that does nothing may earn it."""
    return not any(t.tool_calls for t in turns)


class ScriptedPolicy:
    """A PolicyModel (envs.protocol) playing a fixed plan: `move(turn, messages, tools)` is the assistant's turn N (from 0)."""

    def __init__(self, name: str, move: Move) -> None:
        self.name, self._move = name, move

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        return self._move(sum(1 for m in messages if m.role == "assistant"), messages, tools)

    async def aclose(self) -> None:
        return None


def make_policy(kind: str, task: str, gold: list[GoldTurn] | None = None) -> ScriptedPolicy:
    """The scripted policy `kind` (DEGENERATE or "gold") for one episode of `task`."""
    if kind == "do_nothing":
        return ScriptedPolicy(kind, lambda _t, _m, _tools: Message.assistant(DO_NOTHING))
    if kind == "claim_success":
        return ScriptedPolicy(kind, lambda _t, _m, _tools: Message.assistant(CLAIM))
    if kind == "random_tool":
        rng = random.Random(f"random-tool:{task}")

        def move(turn: int, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
            usable = usable_tools(tools)
            if turn or not usable:
                return Message.assistant(DO_NOTHING)
            return action_message(random_call(usable, rng, messages), "rnd_0")

        return ScriptedPolicy(kind, move)
    if kind != "gold" or not gold:
        raise ValueError(
            f"no scripted policy {kind!r} (with a script: {bool(gold)}): {', '.join(DEGENERATE)} or gold with its turns"
        )

    def replay(turn: int, _messages: list[Message], _tools: list[dict[str, Any]]) -> Message:
        if turn >= len(gold):
            # the env asked for a turn past the script (its own turn limit is higher): the policy's failure, as data
            raise PolicyError(f"the gold script of {task!r} has {len(gold)} turn(s); the env asked for turn {turn + 1}")
        return turn_message(gold[turn], turn)

    return ScriptedPolicy(kind, replay)
