"""Translation between gapforge's protocol types and tau2's: messages in, scores out.

The reward itself is always computed by tau2's `evaluate_simulation`; this module
only renames tau2's `RewardInfo` into a `Score`.
"""

from __future__ import annotations

from typing import Any

from gapforge.envs.protocol import Message, Score
from gapforge.envs.tau2.domain import load_tau2


def to_tau2_assistant(message: Message) -> Any:
    """An assistant protocol message as a tau2 AssistantMessage (tool_calls None when there are none, as tau2 expects)."""
    t = load_tau2()
    calls = [
        t.message.ToolCall(id=tc.id, name=tc.name, arguments=dict(tc.arguments), requestor="assistant")
        for tc in message.tool_calls
    ]
    return t.message.AssistantMessage(role="assistant", content=message.content, tool_calls=calls or None)


def to_score(
    reward_info: Any, evaluation: Any, termination: str, finished: bool, dropped: list[str], data: dict[str, str]
) -> Score:
    """tau2's RewardInfo as a Score: reward, success (tau2's is_successful), named components, what was dropped."""
    t = load_tau2()
    reward = min(1.0, max(0.0, float(reward_info.reward)))
    if dropped and reward_info.reward_basis is not None and not reward_info.reward_basis:
        reward = 0.0  # the judge was the whole basis: nothing was scored, so no credit
    components: dict[str, float] = {}
    for kind, value in (reward_info.reward_breakdown or {}).items():
        components[getattr(kind, "value", str(kind)).lower()] = float(value)
    if reward_info.db_check is not None:
        components.setdefault("db", float(reward_info.db_check.db_reward))
    if reward_info.action_checks:
        components.setdefault("action", 1.0 if all(c.action_match for c in reward_info.action_checks) else 0.0)
    if reward_info.communicate_checks:
        components.setdefault("communicate", 1.0 if all(c.met for c in reward_info.communicate_checks) else 0.0)
    info: dict[str, Any] = {
        "evaluator": "tau2.evaluate_simulation",
        "evaluation_type": evaluation.value,
        "reward_basis": [getattr(b, "value", str(b)) for b in reward_info.reward_basis or []],
        "termination_reason": termination,
        "finished": finished,
        "tau2_data": dict(data),
    }
    if dropped:
        info["dropped_components"] = list(dropped)
        info["dropped_because"] = "no NL judge configured (Tau2Env judge=...)"
    if reward_info.action_checks:
        info["actions_missing"] = [c.action.action_id for c in reward_info.action_checks if not c.action_match]
    if reward_info.communicate_checks:
        info["communicate_missing"] = [c.info for c in reward_info.communicate_checks if not c.met]
    if reward_info.info and "note" in reward_info.info:
        info["note"] = reward_info.info["note"]
    return Score(reward=reward, success=bool(t.is_successful(reward)), components=components, info=info)
