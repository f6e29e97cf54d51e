"""Shop episodes for the synthesis tests: every task's gold actions replayed through the real
shop env (real tool results), as the message dicts the store keeps."""

from __future__ import annotations

from typing import Any

from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env


def gold_episodes(limit: int | None = None) -> list[tuple[str, list[dict[str, Any]], float]]:
    """(task id, messages, reward) for the shop's tasks replayed with their gold actions."""
    env = make_env("shop")
    out = []
    try:
        for task_id in env.task_ids()[:limit]:
            messages = list(env.reset(task_id))
            for i, action in enumerate(env.task(task_id).gold_actions):  # type: ignore[attr-defined]
                call = Message.assistant(
                    tool_calls=[ToolCall(id=f"g{i}", name=action.name, arguments=action.arguments)]
                )
                messages.append(call)
                messages.extend(env.step(call).messages)
            messages.append(Message.assistant(content="Done."))
            result = env.step(messages[-1])
            messages.extend(result.messages)
            out.append((task_id, [m.model_dump(mode="json") for m in messages], env.score().reward))
    finally:
        env.close()
    return out
