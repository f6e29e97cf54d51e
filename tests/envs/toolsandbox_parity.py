"""The parity tests' side of ToolSandbox: `ParityEnv`, the product's ToolSandboxEnv on a worker that can also play
the answer key (toolsandbox_worker/ts_parity_server.py), and `PlanPolicy`, gapforge's policy replaying that plan.

`reference_plan(task)` is the milestone-following plan (toolsandbox_worker/ts_plan.py); `PlanPolicy` replays it one
action a turn ("Done." once used up; a `fill` action is resolved by `resolve_plan_action`, which asks the episode's
worker); `reference_play(task, plan)` is ToolSandbox's own `play_and_evaluate` of the same plan. It follows the
answer key: a reference agent, not a baseline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import Message, TaskRef, ToolCall
from gapforge.envs.toolsandbox import ToolSandboxEnv


class ParityEnv(ToolSandboxEnv):
    worker_script = Path(__file__).resolve().parent / "toolsandbox_worker" / "ts_parity_server.py"

    def reference_plan(self, task: TaskRef, variant: str = "milestones") -> list[dict[str, Any]]:
        """The milestone-following scripted agent's actions for `task` ({"tool", "arguments"} / {"text"})."""
        return list(self._call_on("plan", task, variant=variant))

    def resolve_plan_action(self, action: dict[str, Any]) -> dict[str, Any]:
        """A plan action whose values come from earlier tool results (`fill`), filled from this episode's results."""
        return dict(self._ensure_worker().call("resolve", action=action))

    def reference_play(self, task: TaskRef, plan: list[dict[str, Any]]) -> dict[str, Any]:
        """ToolSandbox's own `play_and_evaluate` of `plan` with the scripted user, without the adapter."""
        self._entry(task)
        self._task = None
        return dict(
            self._call_on("reference", task, plan=plan, replies=self._user.get("replies"), network=self.network)
        )


class PlanPolicy:
    """A policy (envs.protocol.PolicyModel) replaying a fixed plan of {"tool", "arguments"} / {"text"} actions."""

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
        if "tool" not in action:
            return Message.assistant(str(action["text"]))
        arguments = dict(action.get("arguments") or {})
        return Message.assistant(
            tool_calls=[ToolCall(id=f"plan-call-{self.turn}", name=action["tool"], arguments=arguments)]
        )
