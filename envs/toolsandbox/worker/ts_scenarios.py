"""ToolSandbox's base scenarios: catalogue and reset-time builds (ToolSandbox venv only).

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
import random
from collections.abc import Callable
from typing import Any

import tool_sandbox.tools.rapid_api_search_tools as rapid_api
from tool_sandbox.common.execution_context import ExecutionContext, RoleType, set_current_context
from tool_sandbox.common.scenario import Scenario
from tool_sandbox.common.tool_conversion import convert_to_openai_tool
from tool_sandbox.common.tool_discovery import ToolBackend
from tool_sandbox.scenarios.insufficient_information_scenarios import named_insufficient_information_scenarios
from tool_sandbox.scenarios.multiple_tool_call_scenarios import named_multiple_tool_call_scenarios
from tool_sandbox.scenarios.multiple_user_turn_scenarios import named_multiple_user_turn_scenarios
from tool_sandbox.scenarios.single_tool_call_scenarios import named_single_tool_call_scenarios

BUILDERS: dict[str, Callable[..., dict[str, Scenario]]] = {
    "single_tool_call": named_single_tool_call_scenarios,
    "multiple_tool_call": named_multiple_tool_call_scenarios,
    "multiple_user_turn": named_multiple_user_turn_scenarios,
    "insufficient_information": named_insufficient_information_scenarios,
}
BACKEND = ToolBackend.DEFAULT
# Tools backed by RapidAPI web requests (they need the internet and a RAPID_API_KEY).
NETWORK_TOOLS = frozenset(
    name
    for name, fn in inspect.getmembers(rapid_api, inspect.isfunction)
    if fn.__module__ == rapid_api.__name__ and getattr(fn, "is_tool", False)
)


def agent_tools(context: ExecutionContext) -> dict[str, Any]:
    """The agent's allowed tools in `context`, name -> callable (ToolSandbox's own filter)."""
    return {
        name: tool
        for name, tool in context.get_available_tools(scrambling_allowed=True).items()
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
            scenarios.append(
                {
                    "name": name,
                    "module": module,
                    "categories": sorted(str(c).lower() for c in scenario.categories),
                    "tools": sorted(tools),
                    "network_tools": sorted(set(tools) & NETWORK_TOOLS),
                    "milestones": len(scenario.evaluation.milestone_matcher.milestones),
                    "minefields": len(scenario.evaluation.minefield_matcher.milestones),
                    "max_messages": scenario.max_messages,
                }
            )
    return {"scenarios": scenarios, "tool_schemas": schemas}


def build(module: str, name: str, seed: int) -> Scenario:
    """A fresh build of scenario `name` (from `module`), its allow list shuffled with `seed`."""
    scenario = BUILDERS[module](preferred_tool_backend=BACKEND)[name]
    allow = scenario.starting_context.tool_allow_list
    if allow is not None:
        random.Random(seed).shuffle(allow)
    return scenario
