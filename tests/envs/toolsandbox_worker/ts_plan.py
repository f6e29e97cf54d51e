"""The milestone-following scripted agent's plan for a ToolSandbox scenario (ToolSandbox venv only).

A reference / test agent for parity checks, not a baseline: it reads the answer key. Per milestone, in order: the
setter calls its SETTING targets need (`set_wifi_status(on=True)`, ...); its tool calls (each tool-trace target with
its literal arguments; of alternatives, the first the scenario allows), or where it has none, the call its CONTACT /
MESSAGING / REMINDER target implies (added row -> `add_contact` / `send_message_with_phone_number` / `add_reminder`,
removed -> `remove_*` by id, updated -> `modify_*`, arguments from the row, allowed tools only); its reference reply
to the user (the first agent->user content target).

Targets whose values come from an earlier tool result (ToolSandbox's `tool_trace_dependant_similarity`: a timestamp
from `get_current_timestamp`, days from `timestamp_diff`, ...) carry a `fill` (a list of {"milestone", "constraint"}):
when played, `resolve` applies each constraint's own extractor to the latest trace of the referenced milestone's tool
in the live context and fills the call's arguments or formats the reply ("It is {days} days ..."), as the evaluator will.
"""

from __future__ import annotations

import json
from typing import Any

from tool_sandbox.common.evaluation import (
    addition_similarity,
    removal_similarity,
    tool_trace_dependant_similarity,
    update_similarity,
)
from tool_sandbox.common.execution_context import DatabaseNamespace, RoleType
from tool_sandbox.common.scenario import Scenario

# A SETTING-database milestone target (e.g. {"cellular": True}) is reached by ToolSandbox's setter tool.
SETTERS = {
    "low_battery_mode": "set_low_battery_mode_status",
    "wifi": "set_wifi_status",
    "cellular": "set_cellular_service_status",
    "location_service": "set_location_service_status",
}
SETTING_TOOLS = frozenset(SETTERS.values())
# (database, how the target changes it) -> the tool that makes that change, and argument renames.
DB_TOOLS = {
    (DatabaseNamespace.CONTACT, addition_similarity): "add_contact",
    (DatabaseNamespace.CONTACT, removal_similarity): "remove_contact",
    (DatabaseNamespace.CONTACT, update_similarity): "modify_contact",
    (DatabaseNamespace.MESSAGING, addition_similarity): "send_message_with_phone_number",
    (DatabaseNamespace.REMINDER, addition_similarity): "add_reminder",
    (DatabaseNamespace.REMINDER, removal_similarity): "remove_reminder",
    (DatabaseNamespace.REMINDER, update_similarity): "modify_reminder",
}
DB_ARGUMENTS = {
    "add_contact": ("name", "phone_number", "relationship", "is_self"),
    "remove_contact": ("person_id",),
    "modify_contact": ("person_id", "name", "phone_number", "relationship", "is_self"),
    "send_message_with_phone_number": ("phone_number", "content"),
    "add_reminder": ("content", "reminder_timestamp", "latitude", "longitude"),
    "remove_reminder": ("reminder_id",),
    "modify_reminder": ("reminder_id", "content", "reminder_timestamp", "latitude", "longitude"),
}
RENAMES = {"recipient_phone_number": "phone_number"}


def _base(fn: Any) -> Any:
    return getattr(fn, "func", fn)  # functools.partial -> the function


def _dependant(constraint: Any) -> dict[str, Any] | None:
    """The fill keywords (fill_to, extractor) of a tool_trace_dependant_similarity constraint, else None."""
    fn = constraint.snapshot_constraint
    if _base(fn) is tool_trace_dependant_similarity:
        return dict(getattr(fn, "keywords", None) or {})
    return None


def _tool_action(row: dict[str, Any], allowed: set[str]) -> dict[str, Any] | None:
    trace = row.get("tool_trace")
    if not trace or row.get("sender") != RoleType.EXECUTION_ENVIRONMENT:
        return None
    data = json.loads(trace)
    if isinstance(data, list):  # alternatives that all satisfy the milestone: the first the scenario allows
        data = next((d for d in data if d["tool_name"] in allowed), data[0])
    return {"tool": data["tool_name"], "arguments": data.get("arguments") or {}}


def _db_action(namespace: Any, constraint: Any, row: dict[str, Any], allowed: set[str]) -> dict[str, Any] | None:
    tool = DB_TOOLS.get((namespace, _base(constraint)))
    if tool is None or tool not in allowed:
        return None
    named = {RENAMES.get(k, k): v for k, v in row.items()}
    return {"tool": tool, "arguments": {k: named[k] for k in DB_ARGUMENTS[tool] if k in named}}


def _milestone_actions(index: int, milestone: Any, allowed: set[str]) -> list[dict[str, Any]]:
    setters: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    db_calls: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None
    for j, constraint in enumerate(milestone.snapshot_constraints):
        frame = constraint.target_dataframe
        if frame is None or not frame.height:
            continue
        row = frame.row(0, named=True)
        namespace = constraint.database_namespace
        fill = _dependant(constraint)
        if namespace == DatabaseNamespace.SETTING:
            setters += [
                {"tool": SETTERS[c], "arguments": {"on": bool(v)}} for c, v in row.items() if SETTERS.get(c) in allowed
            ]
        elif namespace == DatabaseNamespace.SANDBOX:
            action = _tool_action(row, allowed)
            spec = {"milestone": index, "constraint": j}
            if action is not None and fill and fill.get("fill_to") == "tool_trace":
                same = next((c for c in calls if c["tool"] == action["tool"] and c.get("fill")), None)
                if same is not None:  # constraints filling different arguments of one call (timestamp_0, timestamp_1)
                    same["fill"].append(spec)
                else:
                    calls.append({**action, "fill": [spec]})
            elif action is not None:
                calls.append(action)
            elif (
                reply is None
                and row.get("sender") == RoleType.AGENT
                and row.get("recipient") == RoleType.USER
                and row.get("content")
            ):
                reply = {"text": row["content"]}
                if fill and fill.get("fill_to") == "content":
                    reply["fill"] = [spec]
        else:
            action = _db_action(namespace, constraint.snapshot_constraint, row, allowed)
            if action is not None:
                db_calls.append(action)
    return setters + (calls or db_calls) + ([reply] if reply else [])


def plan(scenario: Scenario, variant: str = "milestones") -> list[dict[str, Any]]:
    """The milestone-following agent's actions (see the module doc); "Done." if no reply ends it.

    variant "skip_settings" drops the setting-changing calls (a wrong-setting control);
    "minefield" first makes the calls of the scenario's minefields (a forbidden-call control).
    """
    if variant not in ("milestones", "minefield", "skip_settings"):
        raise ValueError(f"unknown plan variant {variant!r}")
    allowed = set(scenario.starting_context.tool_allow_list or [])
    actions: list[dict[str, Any]] = []
    if variant == "minefield":
        for i, minefield in enumerate(scenario.evaluation.minefield_matcher.milestones):
            actions += [
                {k: v for k, v in a.items() if k != "fill"}
                for a in _milestone_actions(i, minefield, allowed)
                if "tool" in a
            ]
    for i, milestone in enumerate(scenario.evaluation.milestone_matcher.milestones):
        actions += _milestone_actions(i, milestone, allowed)
    if variant == "skip_settings":
        actions = [a for a in actions if a.get("tool") not in SETTING_TOOLS]
    if not actions or "text" not in actions[-1]:
        actions.append({"text": "Done."})
    return actions


def _traces(context: Any, tool: str | None) -> list[dict[str, Any]]:
    """Every tool trace recorded in the context's SANDBOX database so far, latest first (of `tool` when given)."""
    sandbox = context.get_database(DatabaseNamespace.SANDBOX, get_all_history_snapshots=True)  # every message so far
    out: list[dict[str, Any]] = []
    for cell in sandbox["tool_trace"].to_list():
        for text in cell or []:
            trace = json.loads(text)
            if tool is None or trace.get("tool_name") == tool:
                out.append(trace)
    return out[::-1]


def _referenced_tool(scenario: Scenario, milestone_index: int | None) -> str | None:
    if milestone_index is None:
        return None
    milestones = scenario.evaluation.milestone_matcher.milestones
    for constraint in milestones[milestone_index].snapshot_constraints:
        frame = constraint.target_dataframe
        if constraint.database_namespace == DatabaseNamespace.SANDBOX and frame is not None and frame.height:
            action = _tool_action(frame.row(0, named=True), set(scenario.starting_context.tool_allow_list or []))
            if action is not None:
                return str(action["tool"])
    return None


def resolve(action: dict[str, Any], scenario: Scenario, context: Any) -> dict[str, Any]:
    """`action` without its `fill`: per spec, values extracted (by the constraint's own extractor) from the latest
    trace of the referenced milestone's tool, filled into the call's arguments or the reply; a spec nothing matches
    leaves the action as it was."""
    out = {k: v for k, v in action.items() if k != "fill"}
    for spec in action.get("fill") or []:
        constraint = scenario.evaluation.milestone_matcher.milestones[spec["milestone"]].snapshot_constraints[
            spec["constraint"]
        ]
        keywords = _dependant(constraint) or {}
        values = _extract(
            keywords.get("extractor"),
            _traces(context, _referenced_tool(scenario, constraint.reference_milestone_node_index)),
        )
        if values is None:
            continue
        if keywords.get("fill_to") == "content":
            out["text"] = str(out["text"]).format(**values)
        else:
            out["arguments"] = {**(out.get("arguments") or {}), **values}
    return out


def _extract(extractor: Any, traces: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first normalised value the extractor finds in `traces` (latest first), as the evaluator extracts it."""
    for trace in traces if extractor is not None else []:
        try:
            values = extractor(trace)
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if values:
            return dict(values[0])
    return None
