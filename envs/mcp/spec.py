"""The YAML task file of an MCP target: typed models (unknown keys rejected) and the loader.

`load_target(path)` parses and checks everything that needs no server: keys and
types, one server (command or url), one reset way, one policy source, unique task
ids, at least one success check per task, the grader importable. Checks that need
the server's tool list are `tool_problem(...)`, run once a server has listed its
tools. Every error is one line naming the file, the key and what to do.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gapforge.envs.mcp.errors import TaskFileError, one_line


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSpec(_Strict):
    command: list[str] | None = Field(None, min_length=1, description="stdio server: argv; `python` = this interpreter")
    url: str | None = Field(
        None, pattern=r"^https?://", description="streamable-HTTP server, e.g. http://127.0.0.1:8765/mcp"
    )
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(20.0, gt=0)
    call_timeout_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> "ServerSpec":
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of server.command (a stdio server) or server.url (streamable HTTP)")
        if self.url is not None and (self.cwd is not None or self.env):
            raise ValueError("server.cwd and server.env apply to a started command, not to server.url: remove them")
        return self


class ResetSpec(_Strict):
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    mode: Literal["restart"] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> "ResetSpec":
        if (self.tool is None) == (self.mode is None):
            raise ValueError(
                "give exactly one of reset.tool (a tool called before each episode) or reset.mode: restart"
            )
        if self.arguments and self.tool is None:
            raise ValueError("reset.arguments go with reset.tool: remove them or name the tool")
        return self


class LlmUserSpec(_Strict):
    persona: str = Field(min_length=1)


class UserSpec(_Strict):
    facts: dict[str, str] = Field(
        default_factory=dict, description="name (alternatives joined by |) -> what the user says"
    )
    llm: LlmUserSpec | None = None
    max_turns: int = Field(10, ge=1)


class StateCheck(_Strict):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    expect: Any


class SuccessSpec(_Strict):
    state: list[StateCheck] = Field(default_factory=list)
    phrases: list[str] = Field(default_factory=list)
    grader: str | None = Field(
        None, pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_]*$", description="pkg.module:function or file.py:function"
    )

    @model_validator(mode="after")
    def _some_check(self) -> "SuccessSpec":
        if not (self.state or self.phrases or self.grader):
            raise ValueError(
                "a task needs at least one success check: success.state, success.phrases or success.grader"
            )
        if any(not p.strip() for p in self.phrases):
            raise ValueError("success.phrases has an empty phrase: remove it")
        return self


class TaskSpec(_Strict):
    id: str = Field(min_length=1)
    family: str = Field(min_length=1)
    opening: str = Field(min_length=1)
    user: UserSpec = Field(default_factory=UserSpec)
    success: SuccessSpec


class TargetSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    server: ServerSpec
    reset: ResetSpec
    policy: str | None = None
    policy_file: str | None = None
    hide: list[str] = Field(
        default_factory=list, description="tools the policy is not offered (the reset tool always is not)"
    )
    reward: Literal["all", "share"] = Field(
        "all", description="all: product of the checks (1.0 iff every check passes); share: their mean"
    )
    tasks: list[TaskSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "TargetSpec":
        if (self.policy is None) == (self.policy_file is None):
            raise ValueError(
                "give exactly one of policy (the system prompt) or policy_file (a file beside the task file)"
            )
        if self.reset.mode == "restart" and self.server.url is not None:
            raise ValueError(
                "reset.mode: restart needs a started server (server.command); reset a server.url with reset.tool"
            )
        seen: set[str] = set()
        for t in self.tasks:
            if t.id in seen:
                raise ValueError(f"task id '{t.id}' appears twice: task ids must be unique")
            seen.add(t.id)
        return self


Grader = Callable[[Any], "float | bool"]


@dataclass(frozen=True)
class Target:
    """A loaded task file: the spec, where it lives, the policy text, the server argv and the graders."""

    path: Path
    spec: TargetSpec
    policy: str
    argv: tuple[str, ...] | None  # resolved stdio command, None for a url server
    cwd: str | None
    graders: dict[str, Grader]  # grader spec -> callable

    @property
    def tasks(self) -> dict[str, TaskSpec]:
        return {t.id: t for t in self.spec.tasks}

    def server_key(self) -> tuple[Any, ...]:
        """What makes two servers interchangeable (the pool's key)."""
        s = self.spec.server
        return (self.argv, self.cwd, tuple(sorted(s.env.items())), s.url)


def load_target(path: str | Path) -> Target:
    """The task file at `path`, checked; cached while the file is unchanged."""
    p = Path(path).expanduser().resolve()
    try:
        stat = p.stat()
    except OSError:
        raise TaskFileError(
            f"MCP task file {path} does not exist: give the path of a target YAML (mcp:PATH.yaml)"
        ) from None
    return _load(p, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _load(p: Path, _mtime_ns: int, _size: int) -> Target:
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise TaskFileError(
            f"{p.name}{where}: not valid YAML ({one_line(str(getattr(err, 'problem', err)))}): fix the syntax"
        ) from None
    if not isinstance(raw, dict):
        raise TaskFileError(f"{p.name}: the file must be a mapping with name, server, reset, policy and tasks")
    try:
        spec = TargetSpec.model_validate(raw)
    except ValidationError as err:
        raise TaskFileError(f"{p.name}: {_first_problem(err, raw)}") from None
    base = p.parent
    policy = spec.policy if spec.policy is not None else _read_beside(p, "policy_file", spec.policy_file or "")
    argv, cwd = _resolve_command(spec.server, base) if spec.server.command else (None, None)
    graders = {t.success.grader: _import_grader(p, t.id, t.success.grader) for t in spec.tasks if t.success.grader}
    return Target(path=p, spec=spec, policy=policy, argv=argv, cwd=cwd, graders=graders)


def tool_problem(target: Target, offered: set[str], writes: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The first name in the task file that is not a tool of the server, or a state check on a tool the server
    declares as not read-only (`readOnlyHint: false`), as a one-line message (else None)."""
    spec = target.spec
    names: list[tuple[str, str]] = []
    if spec.reset.tool:
        names.append(("reset.tool", spec.reset.tool))
    names += [(f"hide[{i}]", n) for i, n in enumerate(spec.hide)]
    for i, t in enumerate(spec.tasks):
        names += [(f"tasks[{i}] ({t.id}).success.state[{j}].tool", c.tool) for j, c in enumerate(t.success.state)]
    for key, name in names:
        if name not in offered:
            return (
                f"{target.path.name}: {key} names '{name}', which the MCP server does not offer "
                f"(it offers {', '.join(sorted(offered)) or 'no tools'}): use one of those"
            )
        if ".success.state[" in key and name in writes:
            return (
                f"{target.path.name}: {key} names '{name}', which the server declares as not read-only: "
                "a state check must only read (use a read tool)"
            )
    return None


def _first_problem(err: ValidationError, raw: dict[str, Any]) -> str:
    e = err.errors()[0]
    loc = list(e["loc"])
    key = _key(loc, raw)
    if e["type"] == "extra_forbidden":
        return (
            f"unknown key '{key}': remove it or fix its spelling (the task-file reference: examples/helpdesk/README.md)"
        )
    if e["type"] == "missing":
        return f"'{key}' is required: add it"
    msg = e["msg"].removeprefix("Value error, ")
    return f"{key}: {msg}" if key else msg


def _key(loc: list[Any], raw: dict[str, Any]) -> str:
    """`tasks[3] (pw-004).success.state[0].tool` from a pydantic location (the task's id named when present)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            if loc[:i] == ["tasks"]:
                task = (raw.get("tasks") or [None] * (part + 1))[part] if isinstance(raw.get("tasks"), list) else None
                if isinstance(task, dict) and "id" in task:
                    out += f" ({task['id']})"
        else:
            out += f".{part}" if out else str(part)
    return out


def _read_beside(task_file: Path, key: str, name: str) -> str:
    f = (task_file.parent / name).resolve()
    try:
        return f.read_text(encoding="utf-8")
    except OSError:
        raise TaskFileError(
            f"{task_file.name}: {key} '{name}' cannot be read (looked at {f}): fix the path (relative to the task file)"
        ) from None


def _resolve_command(server: ServerSpec, base: Path) -> tuple[tuple[str, ...], str]:
    """argv with `python` -> this interpreter and words naming files beside the task file made absolute; cwd
    relative to the task file (default: its directory)."""
    assert server.command is not None
    argv = []
    for i, word in enumerate(server.command):
        if i == 0 and word in ("python", "python3"):
            argv.append(sys.executable)
        elif not Path(word).is_absolute() and not word.startswith("-") and (base / word).is_file():
            argv.append(str((base / word).resolve()))
        else:
            argv.append(word)
    cwd = (base / server.cwd).resolve() if server.cwd else base
    if not cwd.is_dir():
        raise TaskFileError(
            f"server.cwd '{server.cwd}' is not a directory (looked at {cwd}): fix the path (relative to the task file)"
        )
    return tuple(argv), str(cwd)


def _import_grader(task_file: Path, task_id: str, ref: str) -> Grader:
    where, _, fn_name = ref.rpartition(":")
    try:
        if where.endswith(".py"):
            file = (task_file.parent / where).resolve()
            spec = importlib.util.spec_from_file_location(f"gapforge_mcp_grader_{abs(hash(str(file)))}", file)
            if spec is None or spec.loader is None or not file.is_file():
                raise ImportError(f"no file {file}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except Exception as err:  # the grader's own module failing to import is the task file's problem
        raise TaskFileError(
            f"{task_file.name}: grader '{ref}' of task {task_id} cannot be imported ({one_line(f'{type(err).__name__}: {err}')}): "
            "fix the module (pkg.module:function, or file.py:function beside the task file)"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise TaskFileError(
            f"{task_file.name}: grader '{ref}' of task {task_id}: {where} has no function {fn_name}: fix the name"
        )
    return fn
