"""What the analyst prompts say about the target: its name and its tools' names (the policy document comes from the
episodes' system message, `compact.system_prompt`). The tool names come from the target env when
`envs.registry.make_env` builds it (its whole tool list, in order), else from the episodes' tool calls. Nothing here
is specific to one target: the prompts name the domain through these facts, never through fixed wording.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TargetBrief:
    name: str
    tool_names: tuple[str, ...]

    def tools_line(self) -> str:
        return ", ".join(self.tool_names) if self.tool_names else "(no tool call seen)"


@functools.lru_cache(maxsize=16)
def _registered_tools(env: str) -> tuple[str, ...] | None:
    """The tool names of a registered target env, None when `make_env` cannot build it."""
    try:
        from gapforge.envs.registry import make_env

        target: Any = make_env(env)
    except Exception:  # noqa: BLE001 - not a registered target (or its extra is missing): the episodes tell
        return None
    try:
        return tuple(t["function"]["name"] for t in target.tools())
    except Exception:  # noqa: BLE001 - a target that cannot list its tools before a task: the episodes tell
        return None
    finally:
        close = getattr(target, "close", None)
        if callable(close):
            close()


def called_tools(messages: Iterable[Any]) -> list[str]:
    """Tool names called in the messages, in first-call order."""
    names: dict[str, None] = {}
    for m in messages:
        calls = (m.get("tool_calls") if isinstance(m, dict) else getattr(m, "tool_calls", None)) or []
        for c in calls:
            fn = c.get("function", c) if isinstance(c, dict) else c
            name = fn.get("name") if isinstance(fn, dict) else getattr(fn, "name", None)
            if name:
                names.setdefault(str(name), None)
    return list(names)


def target_brief(env: str, episodes: Iterable[Any]) -> TargetBrief:
    """The target's name and tool names (see the module docstring); `episodes` have `.messages`."""
    registered = _registered_tools(env)
    if registered is not None:
        return TargetBrief(env, registered)
    names: dict[str, None] = {}
    for ep in episodes:
        names.update((n, None) for n in called_tools(ep.messages))
    return TargetBrief(env, tuple(names))
