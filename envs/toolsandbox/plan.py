"""The milestone-following scripted agent as a PolicyModel, and the paper's metrics over ToolSandbox results.

`PlanPolicy` replays a plan from `ToolSandboxEnv.reference_plan` (one action per
turn: a tool call or a text reply, "Done." once the plan is used up; an action whose
values come from an earlier tool result is filled by `resolve`, e.g.
`ToolSandboxEnv.resolve_plan_action`, which asks the episode's worker). It follows
the scenario's answer key, so it is a reference / test agent, not a baseline.

`paper_metrics` reports what the TRACE paper reports for ToolSandbox: per
category and overall, the number of scenarios run, how many scored a perfect
similarity of 1.0, and the mean similarity; plus how many were excluded (network).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from gapforge.envs.protocol import Message, ToolCall

ALL = "all"


class PlanPolicy:
    """envs.protocol.PolicyModel replaying a fixed plan of {"tool", "arguments"} / {"text"} actions."""

    name = "toolsandbox-milestone-agent"

    def __init__(
        self, plan: list[dict[str, Any]], resolve: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    ) -> None:
        self.plan = list(plan)
        self.turn = 0
        self.resolve = resolve

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        action = self.plan[self.turn] if self.turn < len(self.plan) else {"text": "Done."}
        self.turn += 1
        if self.resolve is not None and action.get("fill"):
            action = await asyncio.to_thread(self.resolve, action)
        if "tool" in action:
            return Message.assistant(
                tool_calls=[
                    ToolCall(
                        id=f"plan-call-{self.turn}", name=action["tool"], arguments=dict(action.get("arguments") or {})
                    )
                ]
            )
        return Message.assistant(str(action["text"]))


class CategoryMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: int
    perfect: int
    mean_similarity: float
    excluded: int = 0


def paper_metrics(
    similarity: Mapping[str, float],
    categories: Mapping[str, list[str]],
    excluded: Mapping[str, list[str]] | None = None,
) -> dict[str, CategoryMetrics]:
    """Per category (and "all"): scenarios run, perfect (similarity == 1.0), mean similarity, excluded.

    similarity: scenario -> ToolSandbox similarity (the episode's reward);
    categories: scenario -> its categories (run and excluded scenarios);
    excluded:   scenario -> why (e.g. its network tools), counted, not scored.
    """
    scores: dict[str, list[float]] = defaultdict(list)
    left_out: dict[str, int] = defaultdict(int)
    for name, value in similarity.items():
        for cat in [ALL, *categories.get(name, [])]:
            scores[cat].append(float(value))
    for name in excluded or {}:
        for cat in [ALL, *categories.get(name, [])]:
            left_out[cat] += 1
    out = {}
    for cat in sorted(set(scores) | set(left_out), key=lambda c: (c != ALL, c)):
        vals = scores.get(cat, [])
        out[cat] = CategoryMetrics(
            run=len(vals),
            perfect=sum(v == 1.0 for v in vals),
            mean_similarity=sum(vals) / len(vals) if vals else 0.0,
            excluded=left_out.get(cat, 0),
        )
    return out
