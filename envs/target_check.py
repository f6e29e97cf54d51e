"""What a loaded target env must satisfy before any work (`check_target`), and what a run records of it
(`fingerprint`, `compare`).

`check_target` (once per process per spec, from envs.registry.make_env): every `TargetEnvironment` method present
with a callable signature, at least one task, `task_family` answering for each, and `tools()` OpenAI function
schemas whose `parameters` are valid JSON Schema (the `jsonschema` meta-schema check `parameters_problem`, shared
with sandbox/checks/schemas.py) with every `required` name a property. Each failure is one `EnvError` line.

`TargetFingerprint`: hashes of the tool schemas, of the (task id, family) set and, for a user's class, of its file.
`compare`: changed tools or tasks refuse a resumed run (its episodes would mix two envs); a changed file only warns.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from gapforge.envs.errors import EnvError
from gapforge.envs.loader import source_of

# method -> (positional parameters after self, what it is called with)
METHODS: dict[str, tuple[int, str]] = {
    "tools": (0, "tools()"),
    "reset": (1, "reset(task)"),
    "step": (1, "step(message)"),
    "score": (0, "score()"),
    "close": (0, "close()"),
    "task_ids": (0, "task_ids()"),
    "task_family": (1, "task_family(task_id)"),
}
FIX = "see gapforge.protocol.TargetEnvironment and docs/your-agent.md"
BUILD = "build each tool with gapforge.protocol.tool_schema"


def _callable_with(fn: Any, n: int) -> bool:
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    except ValueError:
        return True  # no signature to read (a builtin): trust it
    return True


def _meta_schema_problem(schema: dict[str, Any]) -> str | None:
    """The first thing (by jsonschema's `best_match`) that makes `schema` invalid against the JSON Schema meta-schema
    of the draft its `$schema` names, else draft 2020-12 (what pydantic writes; OpenAI function tools take JSON Schema)."""
    from jsonschema import Draft202012Validator  # here: ~80 ms to import, paid only by a check
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    with warnings.catch_warnings():  # an unknown `$schema` URI: jsonschema warns and uses the default draft
        warnings.simplefilter("ignore", DeprecationWarning)
        cls = validator_for(schema, default=Draft202012Validator)
    error = best_match(cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER).iter_errors(schema))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
    return f"{where}: {message}" if where else message


def _required_problem(schema: Any, where: str = "") -> str | None:
    """A `required` name that is not among the `properties` beside it (at the top or in a nested object schema)."""
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required")
    if isinstance(required, list):
        missing = [r for r in required if r not in props]
        if missing:
            names = ", ".join(repr(r) for r in missing)
            return f"{where}required names {names}, which {'is not a property' if len(missing) == 1 else 'are not properties'}"
    nested = [(f"{where}properties.{k}.", sub) for k, sub in props.items()]
    if isinstance(schema.get("items"), dict):
        nested.append((f"{where}items.", schema["items"]))
    return next((p for w, sub in nested if (p := _required_problem(sub, w))), None)


def parameters_problem(params: Any) -> str | None:
    """What is wrong with a tool's `parameters` (one phrase, without the tool's name), or None: not an object schema,
    not valid JSON Schema (`properties.amount: 5 is not of type 'object', 'boolean'`), or a `required` name that
    names no property (`required names 'x', which is not a property`)."""
    if not isinstance(params, dict) or params.get("type") != "object":
        return "must be a JSON schema with type 'object'"
    return _meta_schema_problem(params) or _required_problem(params)


def _schema_problem(i: int, tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return f"tools()[{i}] is a {type(tool).__name__}, not a dict: {BUILD}"
    fn = tool.get("function")
    if tool.get("type") != "function" or not isinstance(fn, dict):
        return f"tools()[{i}] lacks type='function' and a 'function' mapping: {BUILD}"
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        return f"tools()[{i}] has no function.name: {BUILD}"
    problem = parameters_problem(fn.get("parameters", {"type": "object"}))
    if problem:
        return f"tool '{fn['name']}' parameters: {problem}: fix its JSON Schema ({BUILD})"
    try:
        json.dumps(tool)
    except (TypeError, ValueError):
        return f"tool '{fn['name']}' is not JSON-serialisable: {BUILD}"
    return None


def _answer(env: Any, spec: str, call: str, *args: Any, fix: str = "fix the env's code") -> Any:
    """`env.<call>(*args)`; what it raises becomes one EnvError line ending in `fix`."""
    try:
        return getattr(env, call)(*args)
    except Exception as e:
        shown = f"{call}({', '.join(map(repr, args))})"
        raise EnvError(f"env '{spec}': {type(env).__name__}.{shown} raised {type(e).__name__}: {e}: {fix}") from None


def check_target(env: Any, spec: str) -> None:
    """One-line EnvError for the first thing that keeps `env` from being a usable TargetEnvironment."""
    cls = type(env).__name__
    for method, (n, shape) in METHODS.items():
        fn = getattr(env, method, None)
        if not callable(fn):
            raise EnvError(f"env '{spec}': {cls} has no method {shape}: add it ({FIX})")
        if not _callable_with(fn, n):
            raise EnvError(
                f"env '{spec}': {cls}.{method} has signature {inspect.signature(fn)}, but it is called as {shape}: fix its parameters"
            )
    tasks = _answer(env, spec, "task_ids")
    if not isinstance(tasks, (list, tuple)) or not tasks:
        raise EnvError(
            f"env '{spec}': {cls}.task_ids() returned {tasks!r:.60}: return a non-empty list of task id strings"
        )
    bad = next((t for t in tasks if not isinstance(t, str) or not t), None)
    if bad is not None:
        raise EnvError(
            f"env '{spec}': task id {bad!r} is not a non-empty string: task ids are strings (they key stored episodes)"
        )
    if len(set(tasks)) != len(tasks):
        raise EnvError(f"env '{spec}': {cls}.task_ids() lists a task id twice: give each task once")
    for t in tasks:
        family = _answer(env, spec, "task_family", t, fix="it must answer for every task id")
        if not isinstance(family, str) or not family:
            raise EnvError(
                f"env '{spec}': {cls}.task_family({t!r}) returned {family!r}: return a non-empty string (the task's family)"
            )
    tools = _answer(env, spec, "tools")
    if not isinstance(tools, list):
        raise EnvError(
            f"env '{spec}': {cls}.tools() returned a {type(tools).__name__}: return a list of OpenAI function schemas (tool_schema builds one)"
        )
    names: set[str] = set()
    for i, tool in enumerate(tools):
        problem = _schema_problem(i, tool)
        if problem:
            raise EnvError(f"env '{spec}': {problem}")
        name = tool["function"]["name"]
        if name in names:
            raise EnvError(f"env '{spec}': two tools are named '{name}': give each tool its own name")
        names.add(name)


class TargetFingerprint(BaseModel):
    """What a run records of its target env (store/runs.py keeps it as plain data)."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    tool_names: list[str]
    tools_sha256: str
    tasks: int
    tasks_sha256: str
    source: str | None = None  # the file that defines a user's env class
    source_sha256: str | None = None


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint(env: Any, spec: str, *, user_class: bool) -> TargetFingerprint:
    """The env's tool schemas, (task id, family) set and — for a user's class — its source file, hashed."""
    try:
        every_tool = getattr(env, "all_tools", None)  # a composite: every part's schemas, not only the union by name
        tools = list(every_tool() if callable(every_tool) else env.tools())
        tasks = sorted((t, env.task_family(t)) for t in env.task_ids())
    except Exception as e:
        raise EnvError(
            f"env '{spec}': listing its tools and tasks raised {type(e).__name__}: {e}: fix the env's code"
        ) from None
    source = source_of(env) if user_class else None
    return TargetFingerprint(
        spec=spec,
        tool_names=[str(t.get("function", {}).get("name")) for t in tools],
        tools_sha256=_sha(tools),
        tasks=len(tasks),
        tasks_sha256=_sha(tasks),
        source=str(source) if source else None,
        source_sha256=hashlib.sha256(source.read_bytes()).hexdigest() if source and source.is_file() else None,
    )


def compare(stored: Mapping[str, Any], now: TargetFingerprint) -> tuple[str | None, list[str]]:
    """(why the run must not go on, or None; warnings). Tools or tasks changed: refused; the source: a warning."""
    changed: list[str] = []
    if stored.get("tools_sha256") != now.tools_sha256:
        before, after = set(stored.get("tool_names") or []), set(now.tool_names)
        diff = ", ".join([f"+{n}" for n in sorted(after - before)] + [f"-{n}" for n in sorted(before - after)])
        changed.append(f"its tool schemas changed ({diff or 'same names, other schemas'})")
    if stored.get("tasks_sha256") != now.tasks_sha256:
        changed.append(
            f"its task set changed ({stored.get('tasks')} tasks then, {now.tasks} now, or other ids/families)"
        )
    warnings = []
    if stored.get("source_sha256") and now.source_sha256 and stored["source_sha256"] != now.source_sha256:
        warnings.append(
            f"env '{now.spec}': its source {now.source} changed since the run stored episodes "
            f"({stored['source_sha256'][:12]} then, {now.source_sha256[:12]} now); same tools and tasks, so the run goes on"
        )
    return ("; ".join(changed) or None), warnings


def describe(record: Mapping[str, Any]) -> str:
    """One line for `gapforge state` / `rollouts show`: the spec and short hashes of what was recorded."""
    parts = [
        f"{len(record.get('tool_names') or [])} tools {str(record.get('tools_sha256'))[:12]}",
        f"{record.get('tasks')} tasks {str(record.get('tasks_sha256'))[:12]}",
    ]
    if record.get("source_sha256"):
        parts.append(f"source {record.get('source')} {str(record['source_sha256'])[:12]}")
    return f"{record.get('spec')} ({', '.join(parts)})"
