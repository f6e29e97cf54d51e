"""Check 9 (no answer leakage): what the agent is handed before acting -- the system
message and the tool descriptions -- must not contain the reference solution's key arguments.

A key argument is a value the reference solution passes to a tool that the agent has to
*find out*: it appeared in a tool result of the reference episode before the solution
first used it (a customer id from a lookup, item ids from an order, a gift card id from a
profile). What the user says is the user's to say: values in any user message (an order
id in the opening) are not key arguments, and neither are values of a tool's enum (the
schema lists them). Short values (< 4 characters) and booleans are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from gapforge.sandbox.checks.probe import EnvFault, Probe, ReplayedEpisode
from gapforge.sandbox.checks.report import CheckResult

MIN_LEN = 4


def _values(value: Any) -> list[str]:
    """Leaf values of an argument as text (lists flattened; booleans skipped)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, list):
        return [v for item in value for v in _values(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in _values(item)]
    text = str(value).strip()
    return [text] if len(text) >= MIN_LEN else []


def _enum_values(tools: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()

    def walk(schema: Any) -> None:
        if isinstance(schema, dict):
            out.update(str(v) for v in schema.get("enum") or [])
            for sub in schema.values():
                walk(sub)
        elif isinstance(schema, list):
            for sub in schema:
                walk(sub)

    walk(tools)
    return out


def key_arguments(episode: ReplayedEpisode, actions: list[dict[str, Any]], enums: set[str]) -> list[str]:
    """Values the reference solution uses after a tool result revealed them (see the module docstring)."""
    said = "\n".join(m.content or "" for m in episode.initial if m.role == "user")
    said += "\n".join(m.content or "" for s in episode.steps for m in s.messages if m.role == "user")
    results_so_far = ""
    found: dict[str, None] = {}
    used: set[str] = set()
    for action, step in zip(actions, episode.steps):
        for value in _values(action.get("arguments") or {}) if "tool" in action else []:
            if value not in used and value not in enums and value in results_so_far and value not in said:
                found.setdefault(value, None)
            used.add(value)
        results_so_far += "\n".join(m.content or "" for m in step.messages if m.role == "tool")
    return list(found)


def check_no_leakage(probe: Probe, seeds: list[int], tools: list[dict[str, Any]] | None) -> CheckResult:
    enums = _enum_values(tools or [])
    descriptions = json.dumps(
        [(t.get("function") or {}).get("description", "") for t in tools or []]
        + [json.dumps((t.get("function") or {}).get("parameters", {})) for t in tools or []]
    )
    leaks: list[dict[str, Any]] = []
    checked = 0
    try:
        for seed in seeds:
            episode = probe.reference(seed)
            keys = key_arguments(episode, probe.reference_actions(seed), enums)
            checked += len(keys)
            surfaces = {f"{m.role} message": m.content or "" for m in episode.initial if m.role != "user"}
            surfaces["tool descriptions"] = descriptions
            for value in keys:
                for where, text in surfaces.items():
                    if value in text:
                        leaks.append(
                            {"seed": seed, "value": value[:80], "where": where, "context": _context(text, value)}
                        )
    except EnvFault as fault:
        return CheckResult.fail(
            "no_leakage", f"could not replay the reference solution: {fault.describe()}", **fault.evidence()
        )
    if leaks:
        first = leaks[0]
        return CheckResult.fail(
            "no_leakage",
            f"{len(leaks)} leak(s): the {first['where']} of seed {first['seed']} already contains {first['value']!r}, "
            "a value the reference solution has to look up first",
            leaks=leaks[:8],
            key_arguments_checked=checked,
        )
    return CheckResult.ok(
        "no_leakage",
        f"none of {checked} key argument(s) appear before the agent looks them up",
        key_arguments_checked=checked,
    )


def _context(text: str, value: str, width: int = 60) -> str:
    i = text.find(value)
    return text[max(0, i - width) : i + len(value) + width]
