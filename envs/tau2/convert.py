"""Translation between gapforge's protocol types and tau2's: messages in, scores out.

The reward itself is always computed by tau2's `evaluate_simulation`; this module
only picks the evaluation type and renames tau2's `RewardInfo` into a `Score`.
"""

from __future__ import annotations

from typing import Any

from envs.protocol import Message, Score
from envs.tau2.domain import load_tau2


def to_tau2_assistant(message: Message) -> Any:
    """An assistant protocol message as a tau2 AssistantMessage (tool_calls None when there are none, as tau2 expects)."""
    t = load_tau2()
    calls = [t.message.ToolCall(id=tc.id, name=tc.name, arguments=dict(tc.arguments), requestor="assistant") for tc in message.tool_calls]
    return t.message.AssistantMessage(role="assistant", content=message.content, tool_calls=calls or None)


def needs_nl_judge(task: Any) -> bool:
    criteria = task.evaluation_criteria
    return criteria is not None and load_tau2().RewardType.NL_ASSERTION in criteria.reward_basis


def evaluation_type(task: Any) -> Any:
    """tau2's normal type (ALL: DB / env assertions x communicate x actions, per the task's reward basis).

    tau2 hard-wires its NL-assertion judge model in its own config, so the adapter
    configures no judge: a task whose reward basis needs one is scored with ENV (DB check).
    """
    t = load_tau2()
    return t.EvaluationType.ENV if needs_nl_judge(task) else t.EvaluationType.ALL


def to_score(reward_info: Any, evaluation: Any, termination: str, finished: bool) -> Score:
    """tau2's RewardInfo as a Score: reward, success (tau2's is_successful) and named components."""
    t = load_tau2()
    reward = min(1.0, max(0.0, float(reward_info.reward)))
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
    }
    if reward_info.action_checks:
        info["actions_missing"] = [c.action.action_id for c in reward_info.action_checks if not c.action_match]
    if reward_info.communicate_checks:
        info["communicate_missing"] = [c.info for c in reward_info.communicate_checks if not c.met]
    if reward_info.info and "note" in reward_info.info:
        info["note"] = reward_info.info["note"]
    return Score(reward=reward, success=bool(t.is_successful(reward)), components=components, info=info)
