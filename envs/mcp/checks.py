"""An MCP task's success checks and the score they make.

- state: each check calls a (read-only) tool on the live server after the episode
  and compares the answer as data (structured content, else the text parsed as
  JSON) with `expect` by subset match: a mapping matches when every expected key is
  present with a matching value (extra keys are ignored); a list matches a list of
  the same length element by element; anything else by equality. A tool error fails
  the check.
- phrases: each must appear in the assistant's text of the episode (all its text
  turns joined), case-insensitively, whitespace runs alike.
- grader: `function(context) -> float | bool` with a `GraderContext`; its value in
  [0, 1] counts as one check (True = 1.0).

The task file's `reward` rule makes the reward: `all` (the default) = the product of
the check values, so 1.0 iff every check passes (τ²-bench's DB x communicate, with
the grader's value as a factor); `share` = their mean (partial credit; a policy that
does the asked thing plus unasked writes then still earns the bookkeeping checks).
success = every check passed, under both. Components: `state`, `phrases`, `grader`,
each the share of its kind passed (only the kinds the task uses).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from gapforge.envs.mcp.client import CallOutcome
from gapforge.envs.mcp.errors import ServerFailure
from gapforge.envs.mcp.spec import TaskSpec
from gapforge.envs.protocol import Message, Score
from gapforge.faults import EnvCodeFault

CallTool = Callable[[str, dict[str, Any]], CallOutcome]


@dataclass(frozen=True)
class GraderContext:
    """What a Python grader sees: the task, the episode's messages, the agent's text, and read access to the server."""

    task_id: str
    family: str
    messages: list[Message]
    said: str
    call_tool: Callable[[str, dict[str, Any]], Any]  # name, arguments -> the answer as data (raises on a tool error)


class GraderError(EnvCodeFault, RuntimeError):
    """The task's Python grader raised or returned something that is not a number in [0, 1]."""


def mismatch(expected: Any, actual: Any, where: str = "") -> str | None:
    """None when `actual` matches `expected` by subset match, else where and how it differs (short)."""
    at = where or "the answer"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{at} is {_short(actual)}, expected a mapping"
        for key, value in expected.items():
            if key not in actual:
                return f"{at} has no key '{key}'"
            problem = mismatch(value, actual[key], f"{where}.{key}" if where else str(key))
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{at} is {_short(actual)}, expected a list of {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            problem = mismatch(e, a, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if expected != actual or isinstance(expected, bool) != isinstance(actual, bool):
        return f"{at} is {_short(actual)}, expected {_short(expected)}"
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def score_task(
    task: TaskSpec,
    *,
    call_tool: CallTool,
    messages: list[Message],
    grader: Callable[[Any], Any] | None,
    info: dict[str, Any],
    rule: str = "all",
) -> Score:
    """The task's checks on the episode so far; `info` (family, user, ...) is extended with what failed."""
    said = "\n".join(m.content for m in messages if m.role == "assistant" and m.content)
    values: dict[str, list[float]] = {}
    failed: list[str] = []
    for check in task.success.state:
        outcome = call_tool(check.tool, dict(check.arguments))
        problem = f"tool error: {outcome.text[:120]}" if outcome.is_error else mismatch(check.expect, outcome.value())
        values.setdefault("state", []).append(0.0 if problem else 1.0)
        if problem:
            failed.append(f"{check.tool}({_args(check.arguments)}): {problem}")
    heard = _flat(said)
    missing = [p for p in task.success.phrases if _flat(p) not in heard]
    if task.success.phrases:
        values["phrases"] = [0.0 if p in missing else 1.0 for p in task.success.phrases]
    if grader is not None:
        values["grader"] = [_grade(task, grader, messages, said, call_tool)]
    flat = [v for vs in values.values() for v in vs]
    reward = math.prod(flat) if rule == "all" else sum(flat) / len(flat)
    components = {kind: sum(vs) / len(vs) for kind, vs in values.items()}
    evaluator = "mcp: every check (product)" if rule == "all" else "mcp: share of the checks passed"
    info = {**info, "evaluator": evaluator, "checks": len(flat), "failed_checks": failed, "missing_phrases": missing}
    return Score(reward=reward, success=all(v == 1.0 for v in flat), components=components, info=info)


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def _grade(
    task: TaskSpec, grader: Callable[[Any], Any], messages: list[Message], said: str, call_tool: CallTool
) -> float:
    def read(name: str, arguments: dict[str, Any]) -> Any:
        outcome = call_tool(name, dict(arguments))
        if outcome.is_error:
            raise GraderError(f"tool {name} answered the grader with an error: {outcome.text[:200]}")
        return outcome.value()

    ctx = GraderContext(task_id=task.id, family=task.family, messages=list(messages), said=said, call_tool=read)
    try:
        value = grader(ctx)
    except (ServerFailure, GraderError):
        raise
    except Exception as err:
        raise GraderError(
            f"grader {task.success.grader} failed on task {task.id}: {type(err).__name__}: {err}"
        ) from err
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise GraderError(
            f"grader {task.success.grader} returned {value!r} on task {task.id}: return a number in [0, 1] or a bool"
        )
    return float(value)
