"""The ToolSandbox worker of the parity tests (ToolSandbox venv only, run as `python ts_parity_server.py`): the
product's worker (envs/toolsandbox/worker/ts_server.py) plus three methods that play the answer key.

    plan       the milestone-following plan of a scenario (ts_plan.plan), from the live episode's build when it
               plays that scenario
    resolve    a plan action with its `fill` resolved against the live episode's tool results so far
    reference  ToolSandbox's own `play_and_evaluate` of a plan with the plan agent and the scripted user (no gapforge
               adapter involved): what the adapter's score is checked against

The plan agent is ToolSandbox's OpenAI agent answering with the next action of a fixed plan, one action a turn. What
imports tool_sandbox is imported once `main` has pointed fd 1 at stderr (as the product's worker does), so nothing
printed at import reaches the protocol channel.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "envs" / "toolsandbox" / "worker"), str(HERE)]

from ts_server import Worker, main  # noqa: E402 - the product's worker, found through the path above


def action_message(action: dict[str, Any], turn: int) -> dict[str, Any]:
    """A plan action ({"tool", "arguments"} or {"text"}) -> an OpenAI assistant message dict."""
    if "tool" in action:
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": action["tool"], "arguments": json.dumps(action.get("arguments") or {})},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": str(action["text"])}


def plan_agent(plan: list[dict[str, Any]], resolve: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """ToolSandbox's OpenAI agent answering with the next action of `plan` (a `fill` resolved first by `resolve`)."""
    from tool_sandbox.roles.openai_api_agent import OpenAIAPIAgent
    from ts_roles import completion

    class PlanAgent(OpenAIAPIAgent):
        model_name = "gapforge-plan"

        def __init__(self) -> None:
            self.turn = 0

        def model_inference(self, openai_messages: Any, openai_tools: Any) -> Any:
            action = plan[self.turn] if self.turn < len(plan) else {"text": "Done."}
            if action.get("fill"):
                action = resolve(action)
            self.turn += 1
            return completion(action_message(action, self.turn))

    return PlanAgent()


class ParityWorker(Worker):
    def __init__(self) -> None:
        super().__init__()
        import ts_plan

        self.plans = ts_plan

    def plan(self, scenario: str, seed: int, variant: str, module: str | None = None) -> list[dict[str, Any]]:
        if self.episode is not None and self.episode.name == scenario:
            return self.plans.plan(self.episode.scenario, variant)
        return self.plans.plan(self.sc.build(self._module(scenario, module), scenario, int(seed)), variant)

    def resolve(self, action: dict[str, Any]) -> dict[str, Any]:
        from tool_sandbox.common.execution_context import get_current_context

        return self.plans.resolve(action, self._live().scenario, get_current_context())

    def reference(
        self,
        scenario: str,
        seed: int,
        plan: list[dict[str, Any]],
        replies: list[str] | None = None,
        module: str | None = None,
        network: str = "off",
    ) -> dict[str, Any]:
        from tool_sandbox.common.execution_context import RoleType, get_current_context
        from tool_sandbox.roles.execution_environment import ExecutionEnvironment
        from ts_episode import failed_play, similarities
        from ts_roles import ScriptedUser
        from ts_standin import report

        self.close()
        self._network(network)
        built = self.sc.build(self._module(scenario, module), scenario, int(seed))
        roles = {
            RoleType.AGENT: plan_agent(plan, lambda action: self.plans.resolve(action, built, get_current_context())),
            RoleType.USER: ScriptedUser(replies),
            RoleType.EXECUTION_ENVIRONMENT: ExecutionEnvironment(),
        }
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result = built.play_and_evaluate(
                    roles=roles, output_directory=Path(tmp), scenario_name=scenario
                ).evaluation_result
            except Exception as exc:  # noqa: BLE001 - a play that raises scores 0 (failed_play), as in an episode
                exception = f"{type(exc).__name__}: {exc}"[:500]
                return {**failed_play(built.max_messages), "exception": exception, "stand_in_network": report()}
        return {**similarities(result), "stand_in_network": report()}

    def dispatch(self, method: str, p: dict[str, Any]) -> Any:
        if method == "plan":
            return self.plan(p["scenario"], p.get("seed", 0), p.get("variant", "milestones"), p.get("module"))
        if method == "resolve":
            return self.resolve(p["action"])
        if method == "reference":
            return self.reference(
                p["scenario"], p.get("seed", 0), p["plan"], p.get("replies"), p.get("module"), p.get("network", "off")
            )
        return super().dispatch(method, p)


if __name__ == "__main__":
    main(ParityWorker)
