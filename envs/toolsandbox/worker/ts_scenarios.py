"""ToolSandbox's base scenarios: catalogue, reset-time builds, milestone plans (ToolSandbox venv only).

The 129 base scenarios come from ToolSandbox's four scenario modules (the
`NO_DISTRACTION_TOOLS` set its `named_scenarios` extends into 1032 variants).
Scenarios are built when an episode starts, because ToolSandbox computes some
targets from `datetime.now()` at build time; the module that defines the asked
scenario is rebuilt and the allow-list order shuffled with the episode's seed
(ToolSandbox shuffles it with the unseeded global `random`).
"""

from __future__ import annotations

import copy
import inspect
import json
import random
from collections.abc import Callable
from typing import Any

import tool_sandbox.tools.rapid_api_search_tools as rapid_api
from tool_sandbox.common.execution_context import (
    DatabaseNamespace,
    ExecutionContext,
    RoleType,
    set_current_context,
)
from tool_sandbox.common.scenario import Scenario
from tool_sandbox.common.tool_conversion import convert_to_openai_tool
from tool_sandbox.common.tool_discovery import ToolBackend
from tool_sandbox.scenarios.insufficient_information_scenarios import (
    named_insufficient_information_scenarios,
)
from tool_sandbox.scenarios.multiple_tool_call_scenarios import (
    named_multiple_tool_call_scenarios,
)
from tool_sandbox.scenarios.multiple_user_turn_scenarios import (
    named_multiple_user_turn_scenarios,
)
from tool_sandbox.scenarios.single_tool_call_scenarios import (
    named_single_tool_call_scenarios,
)

BUILDERS: dict[str, Callable[..., dict[str, Scenario]]] = {
    "single_tool_call": named_single_tool_call_scenarios,
    "multiple_tool_call": named_multiple_tool_call_scenarios,
    "multiple_user_turn": named_multiple_user_turn_scenarios,
    "insufficient_information": named_insufficient_information_scenarios,
}
BACKEND = ToolBackend.DEFAULT
# Tools backed by RapidAPI web requests (they need the internet and a RAPID_API_KEY).
NETWORK_TOOLS = frozenset(
    name for name, fn in inspect.getmembers(rapid_api, inspect.isfunction)
    if fn.__module__ == rapid_api.__name__ and getattr(fn, "is_tool", False)
)
# A SETTING-database milestone target (e.g. {"cellular": True}) is reached by ToolSandbox's setter tool.
SETTERS = {"low_battery_mode": "set_low_battery_mode_status", "wifi": "set_wifi_status", "cellular": "set_cellular_service_status", "location_service": "set_location_service_status"}
SETTING_TOOLS = frozenset(SETTERS.values())


def agent_tools(context: ExecutionContext) -> dict[str, Any]:
    """The agent's allowed tools in `context`, name -> callable (ToolSandbox's own filter)."""
    return {
        name: tool for name, tool in context.get_available_tools(scrambling_allowed=True).items()
        if RoleType.AGENT in getattr(tool, "visible_to", (RoleType.AGENT,))
    }


def catalog() -> dict[str, Any]:
    """Every base scenario: module, categories, allowed tools, network need; plus each tool's schema."""
    scenarios: list[dict[str, Any]] = []
    schemas: dict[str, Any] = {}
    for module, build in BUILDERS.items():
        for name, scenario in build(preferred_tool_backend=BACKEND).items():
            context = copy.deepcopy(scenario.starting_context)
            set_current_context(context)
            tools = agent_tools(context)
            for tool_name, tool in tools.items():
                schemas.setdefault(tool_name, convert_to_openai_tool(tool, tool_name))
            scenarios.append({
                "name": name,
                "module": module,
                "categories": sorted(str(c).lower() for c in scenario.categories),
                "tools": sorted(tools),
                "network_tools": sorted(set(tools) & NETWORK_TOOLS),
                "milestones": len(scenario.evaluation.milestone_matcher.milestones),
                "minefields": len(scenario.evaluation.minefield_matcher.milestones),
                "max_messages": scenario.max_messages,
            })
    return {"scenarios": scenarios, "tool_schemas": schemas}


def build(module: str, name: str, seed: int) -> Scenario:
    """A fresh build of scenario `name` (from `module`), its allow list shuffled with `seed`."""
    scenario = BUILDERS[module](preferred_tool_backend=BACKEND)[name]
    allow = scenario.starting_context.tool_allow_list
    if allow is not None:
        random.Random(seed).shuffle(allow)
    return scenario


def _targets(milestones: list[Any], allowed: set[str]) -> list[list[dict[str, Any]]]:
    """Per milestone: the setter calls its SETTING targets need (as rows with a "setter" key,
    allowed tools only), then the first row of each SANDBOX-namespace target dataframe."""
    out = []
    for milestone in milestones:
        setters, rows = [], []
        for constraint in milestone.snapshot_constraints:
            frame = constraint.target_dataframe
            if frame is None or not frame.height:
                continue
            if constraint.database_namespace == DatabaseNamespace.SETTING:
                for column, value in frame.row(0, named=True).items():
                    if SETTERS.get(column) in allowed:
                        setters.append({"setter": {"tool": SETTERS[column], "arguments": {"on": bool(value)}}})
            elif constraint.database_namespace == DatabaseNamespace.SANDBOX:
                rows.append(frame.row(0, named=True))
        out.append(setters + rows)
    return out


def _tool_action(row: dict[str, Any]) -> dict[str, Any] | None:
    if "setter" in row:
        return dict(row["setter"])
    trace = row.get("tool_trace")
    if not trace or row.get("sender") != RoleType.EXECUTION_ENVIRONMENT:
        return None
    data = json.loads(trace)
    if isinstance(data, list):  # alternatives that all satisfy the milestone: take the first
        data = data[0]
    return {"tool": data["tool_name"], "arguments": data.get("arguments") or {}}


def plan(scenario: Scenario, variant: str = "milestones") -> list[dict[str, Any]]:
    """The milestone-following scripted agent's actions: per milestone, the setter calls its
    SETTING targets need, its tool calls (tool-trace targets, literal arguments; the first of
    alternatives), then its reference reply to the user (the first agent->user content target);
    "Done." if no reply ends the plan. Targets of other databases are left to those calls.

    variant "skip_settings" drops the setting-changing calls (a wrong-setting control);
    "minefield" first makes the calls of the scenario's minefields (a forbidden-call control).
    """
    actions: list[dict[str, Any]] = []
    allowed = set(scenario.starting_context.tool_allow_list or [])
    if variant == "minefield":
        for rows in _targets(scenario.evaluation.minefield_matcher.milestones, allowed):
            actions += [a for a in map(_tool_action, rows) if a]
    for rows in _targets(scenario.evaluation.milestone_matcher.milestones, allowed):
        actions += [a for a in map(_tool_action, rows) if a]
        reply = next((r["content"] for r in rows if "setter" not in r and r.get("sender") == RoleType.AGENT and r.get("recipient") == RoleType.USER and r.get("content")), None)
        if reply is not None:
            actions.append({"text": reply})
    if variant == "skip_settings":
        actions = [a for a in actions if a.get("tool") not in SETTING_TOOLS]
    elif variant not in ("milestones", "minefield"):
        raise ValueError(f"unknown plan variant {variant!r}")
    if not actions or "text" not in actions[-1]:
        actions.append({"text": "Done."})
    return actions
