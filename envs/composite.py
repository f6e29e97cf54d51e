"""CompositeEnv: several target envs analysed as one target, e.g. `composite:tau2:airline+tau2:retail`.

The spec is `composite:` and two or more env specs joined by `+`, each any spec `make_env` takes with its own options
(`composite:tau2:airline?max_steps=50+tau2:retail?max_steps=50`; a part may not contain `+` nor be a composite). Each
part's prefix is the last `:`-segment of its spec before `?` (`tau2:airline` -> `airline`, `path/x.py:MyEnv` ->
`MyEnv`, `mcp:dir/target.yaml` -> `target`) or the name given as `NAME=SPEC`; two parts with one prefix are refused.
Task ids and families carry it (`airline/12`, `airline/cancel_reservation`), so the family-stratified analysis split
stays per env and the report shows each env's families apart. `reset("retail/7")` plays task `7` in the retail part,
whose `tools()`, `step`, `score` and `done` answer until the next reset.

Before any reset `tools()` is the union of the parts' tools by name (the first part's schema where names clash);
`all_tools()` lists every part's schemas in order, which the run's fingerprint hashes (a change in any part refuses a
resumed run). `max_turns` is the largest of the parts' limits (the loop never cuts a τ² part before τ²'s cap does).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, Score, StepResult, TargetEnvironment, TaskRef

PREFIX = "composite:"
JOIN = "+"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_NAMED = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)=(.+)$")  # `name=spec`: the name has no ':', '?', '/' or '.'


def part_prefix(spec: str) -> str:
    """The prefix a part's task ids get: the last `:`-segment of its spec before `?` (a path: its file stem)."""
    base = spec.partition("?")[0]
    tail = base.rsplit(":", 1)[-1]
    if "/" in tail or tail.endswith((".yaml", ".yml", ".py", ".json")):
        tail = Path(tail).stem
    return _UNSAFE.sub("_", tail)


def parse_composite(spec: str) -> list[tuple[str, str]]:
    """`composite:A+B[+...]` -> [(prefix, part spec), ...]; a malformed spec is one EnvError line naming the form."""
    if not spec.startswith(PREFIX):
        raise EnvError(
            f"env '{spec}' is not a composite: write composite:ENV1+ENV2, e.g. composite:tau2:airline+tau2:retail"
        )
    parts = [p.strip() for p in spec[len(PREFIX) :].split(JOIN)]
    if len(parts) < 2 or not all(parts):
        raise EnvError(
            f"env '{spec}': a composite joins two or more env specs with '+', e.g. composite:tau2:airline+tau2:retail"
        )
    out: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for part in parts:
        if part.startswith(PREFIX):
            raise EnvError(f"env '{spec}': part '{part}' is itself a composite: list its envs in one composite instead")
        named = _NAMED.match(part)
        prefix, part = (named.group(1), named.group(2)) if named else (part_prefix(part), part)
        if not prefix:
            raise EnvError(
                f"env '{spec}': part '{part}' gives no name to prefix its task ids with: end its spec with a name"
            )
        if prefix in seen:
            raise EnvError(
                f"env '{spec}': parts '{seen[prefix]}' and '{part}' would both prefix their task ids with '{prefix}/': "
                "name them, e.g. composite:a=SPEC+b=SPEC"
            )
        seen[prefix] = part
        out.append((prefix, part))
    return out


class CompositeEnv:
    """The parts of a `composite:` spec behind one TargetEnvironment (module docstring).

    `make(spec, user=, user_model=)` builds a part (envs.registry.make_env passes itself: this module does not import
    the registry); every part gets the same user simulator settings. A part that cannot be built is one EnvError
    line naming the part; parts built before it are closed.
    """

    def __init__(
        self, spec: str, *, user: str = "scripted", user_model: Any = None, make: Callable[..., TargetEnvironment]
    ) -> None:
        self.name = spec
        self.parts: dict[str, TargetEnvironment] = {}
        self.specs: dict[str, str] = {}
        try:
            for prefix, part in parse_composite(spec):
                try:
                    self.parts[prefix] = make(part, user=user, user_model=user_model)
                except EnvError as e:
                    raise EnvError(f"composite env '{spec}', part '{part}': {e}") from None
                self.specs[prefix] = part
            self._routes: dict[str, tuple[str, str]] = {}
            for prefix, env in self.parts.items():
                for task in env.task_ids():
                    self._routes[f"{prefix}/{task}"] = (prefix, str(task))
        except BaseException:
            self.close()
            raise
        self.inline = all(getattr(env, "inline", False) is True for env in self.parts.values())
        self._active: TargetEnvironment | None = None

    def task_ids(self) -> list[str]:
        return list(self._routes)

    def task_family(self, task_id: str) -> str:
        prefix, task = self._route(task_id)
        return f"{prefix}/{self.parts[prefix].task_family(task)}"

    def part_of(self, task_id: TaskRef) -> str:
        """The spec of the part that plays `task_id`."""
        return self.specs[self._route(task_id)[0]]

    def tools(self) -> list[dict[str, Any]]:
        if self._active is not None:
            return self._active.tools()
        union: dict[str, dict[str, Any]] = {}
        for env in self.parts.values():
            for tool in env.tools():
                union.setdefault(str(tool.get("function", {}).get("name")), tool)
        return list(union.values())

    def all_tools(self) -> list[dict[str, Any]]:
        """Every part's tool schemas in part order (what the run's fingerprint hashes)."""
        return [tool for env in self.parts.values() for tool in env.tools()]

    @property
    def max_turns(self) -> int | None:
        limits = [t for t in (getattr(env, "max_turns", None) for env in self.parts.values()) if isinstance(t, int)]
        return max(limits) if limits else None

    def _route(self, task_id: TaskRef) -> tuple[str, str]:
        key = str(task_id)
        if key in self._routes:
            return self._routes[key]
        prefixes = ", ".join(f"{p}/" for p in self.parts)
        raise EnvError(f"unknown task id {key!r} for {self.name}: its task ids start with {prefixes} (see task_ids())")

    def reset(self, task: TaskRef) -> list[Message]:
        prefix, inner = self._route(task)
        self._active = self.parts[prefix]
        return self._active.reset(inner)

    @property
    def done(self) -> bool:
        return self._active is not None and getattr(self._active, "done", False) is True

    def step(self, message: Message) -> StepResult:
        return self._playing().step(message)

    def score(self) -> Score:
        env = self._playing()
        score = env.score()
        return score.model_copy(update={"info": {**score.info, "composite_part": getattr(env, "name", "")}})

    def _playing(self) -> TargetEnvironment:
        if self._active is None:
            raise EnvError(f"{self.name}: call reset(task) before step() or score()")
        return self._active

    def close(self) -> None:
        self._active = None
        first: BaseException | None = None
        for env in self.parts.values():
            try:
                env.close()
            except Exception as e:  # noqa: BLE001 - close every part, then report the first failure
                first = first or e
        if first is not None:
            raise first
