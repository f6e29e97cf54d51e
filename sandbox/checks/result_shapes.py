"""Check 8 (result-format fidelity): the JSON shape of a synthetic env's tool results must
match the shape of the results the TARGET env returned in its stored episodes.

A shape is the merge of the JSON values seen for one tool: the JSON types, and for objects
the keys (with the shape of each) and which keys every observation had; for arrays the
shape of the items. `integer` and `number` are one type; `null` fits any type (optional
fields); `Error: ...` texts are tool errors, not results, and are skipped on both sides.

Objects keyed by data (payment methods by id, options by name: no key in every observation)
are compared as maps: the shape of their values, not their keys.

Rules for a tool shared with the target: the env's results may omit keys the target has
(only the fields that matter), but must not invent keys the target never returns, must
keep the target's types for the keys it shares, must share at least one key with each
target object, and must not return text where the target returns JSON (or the reverse).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gapforge.sandbox.checks.probe import EnvFault, Probe
from gapforge.sandbox.checks.report import CheckResult

Shape = dict[str, Any]
MAX_PROBLEMS = 8


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def shape_of(value: Any) -> Shape:
    """The shape of one JSON value."""
    t = _type(value)
    shape: Shape = {"types": [t]}
    if t == "object":
        shape["keys"] = {k: shape_of(v) for k, v in value.items()}
        shape["always"] = sorted(value)
    elif t == "array":
        items = [shape_of(v) for v in value]
        shape["items"] = merge_shapes(items) if items else None
    return shape


def merge_shapes(shapes: Iterable[Shape | None]) -> Shape:
    """One shape covering every given shape (None entries are ignored)."""
    out: Shape = {"types": []}
    for s in shapes:
        if s is None:
            continue
        out["types"] = sorted(set(out["types"]) | set(s["types"]))
        if "keys" in s:
            keys = out.setdefault("keys", {})
            for k, sub in s["keys"].items():
                keys[k] = merge_shapes([keys.get(k), sub])
            always = set(s["always"]) if "always" not in out else set(out["always"]) & set(s["always"])
            out["always"] = sorted(always)
        if "items" in s and s["items"] is not None:
            out["items"] = merge_shapes([out.get("items"), s["items"]])
        elif "items" in s:
            out.setdefault("items", None)
    return out


def result_shape(content: str | None) -> Shape | None:
    """The shape of one tool result; None for a tool error ('Error: ...'); {"types": ["text"]} for non-JSON."""
    text = content or ""
    if text.startswith("Error"):
        return None
    try:
        return shape_of(json.loads(text))
    except (json.JSONDecodeError, TypeError):
        return {"types": ["text"]}


def observed_result_shapes(episodes: Iterable[list[dict[str, Any]]]) -> dict[str, Shape]:
    """Tool name -> merged result shape over stored episodes (lists of message dicts in the protocol's JSON form)."""
    found: dict[str, list[Shape]] = {}
    for messages in episodes:
        names = {
            c.get("id"): c.get("name") for m in messages for c in (m.get("tool_calls") or []) if isinstance(c, dict)
        }
        for m in messages:
            if m.get("role") != "tool":
                continue
            name = m.get("name") or names.get(m.get("tool_call_id"))
            shape = result_shape(m.get("content"))
            if name and shape is not None:
                found.setdefault(name, []).append(shape)
    return {name: merge_shapes(shapes) for name, shapes in found.items()}


def _is_map(shape: Shape) -> bool:
    """An object keyed by data (ids, option names) rather than a record with fixed fields:
    no key is in every observation, or every key holds a digit (e.g. 'credit_card_1212278')."""
    keys = shape.get("keys") or {}
    return len(keys) >= 2 and (not shape.get("always") or all(any(ch.isdigit() for ch in k) for k in keys))


def shape_problems(mine: Shape, theirs: Shape, where: str) -> list[str]:
    """How the env's shape `mine` departs from the target's `theirs` (see the module docstring)."""
    my_types, their_types = set(mine["types"]) - {"null"}, set(theirs["types"]) - {"null"}
    if not my_types or not their_types:
        return []
    extra = my_types - their_types
    if extra:
        return [f"{where}: is {'/'.join(sorted(extra))}, target returns {'/'.join(sorted(their_types))}"]
    problems: list[str] = []
    if "object" in my_types and "keys" in mine and "keys" in theirs and _is_map(theirs):
        return shape_problems(
            merge_shapes(mine["keys"].values()), merge_shapes(theirs["keys"].values()), f"{where}{{*}}"
        )
    if "object" in my_types and "keys" in mine and "keys" in theirs:
        invented = sorted(set(mine["keys"]) - set(theirs["keys"]))
        if invented:
            problems.append(
                f"{where}: keys {invented} that the target never returns (target keys: {sorted(theirs['keys'])[:15]})"
            )
        shared = sorted(set(mine["keys"]) & set(theirs["keys"]))
        if mine["keys"] and theirs["keys"] and not shared:
            problems.append(f"{where}: no key in common with the target's results {sorted(theirs['keys'])[:15]}")
        for k in shared:
            problems += shape_problems(mine["keys"][k], theirs["keys"][k], f"{where}.{k}")
    if "array" in my_types and mine.get("items") and theirs.get("items"):
        problems += shape_problems(mine["items"], theirs["items"], f"{where}[]")
    return problems


def check_result_format(probe: Probe, seeds: list[int], target_shapes: dict[str, Shape] | None) -> CheckResult:
    """The env's tool results over the reference episodes vs the target's observed results."""
    if target_shapes is None:
        return CheckResult.skip("result_format", "no stored target episodes given: result formats not compared")
    seen: dict[str, list[Shape]] = {}
    try:
        for seed in seeds:
            episode = probe.reference(seed)
            for name, content in episode.tool_results():
                shape = result_shape(content)
                if shape is not None:
                    seen.setdefault(name, []).append(shape)
    except EnvFault as fault:
        return CheckResult.fail(
            "result_format", f"could not replay the reference solution: {fault.describe()}", **fault.evidence()
        )
    compared = sorted(n for n in seen if n in target_shapes)
    problems = [p for n in compared for p in shape_problems(merge_shapes(seen[n]), target_shapes[n], n)]
    evidence = {"compared_tools": compared, "not_in_target_episodes": sorted(n for n in seen if n not in target_shapes)}
    if problems:
        return CheckResult.fail(
            "result_format",
            f"{len(problems)} result-format mismatch(es) with the target's episodes: {problems[0]}",
            problems=problems[:MAX_PROBLEMS],
            **evidence,
        )
    if not compared:
        return CheckResult.skip(
            "result_format", "not checked: no tool result to compare with the target's stored episodes", **evidence
        )
    return CheckResult.ok(
        "result_format",
        f"results of {len(compared)} tool(s) match the target's episodes: {', '.join(compared)}",
        **evidence,
    )
