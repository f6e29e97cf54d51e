"""The tiny model driven through agents.policy.run_episode against a small environment.

With random weights, whatever the model emits, the episode is recorded with a reason.
To exercise both outcomes deterministically, the tiny model is also taught (a few
dozen full fine-tuning steps, greedy decoding) to emit one valid tool call for one
request and one broken tool call for another (tests/serving/tool_call_model.py, fixture
`taught_model_dir` in tests/serving/conftest.py, shared with the routed-endpoint tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tool_call_model import BROKEN_REQUEST, GOOD_REQUEST, TEACH, OrderDesk

from gapforge.envs.protocol import Environment
from gapforge.serving.local import LocalPolicy

agents_policy = pytest.importorskip("gapforge.agents.policy")


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_tiny_model_episode_is_recorded_with_a_reason(tiny_model_dir: Path, seed: int) -> None:
    env = OrderDesk()
    assert isinstance(env, Environment)
    policy = LocalPolicy(tiny_model_dir, max_new_tokens=24, seed=seed)
    episode = await agents_policy.run_episode(policy, env, 1234567, max_turns=3, temperature=1.0)

    assert (episode.env, episode.task, episode.policy) == ("order_desk", 1234567, policy.name)
    assert [m.role for m in episode.messages[:2]] == ["system", "user"]
    assert episode.timings["policy_s"] > 0 and episode.timings["total_s"] >= episode.timings["policy_s"]
    assistant = [m for m in episode.messages if m.role == "assistant"]
    if episode.termination == "malformed_output":
        # the raw completion is kept as the last assistant message, with the parse error as the reason
        assert episode.error and assistant and episode.messages[-1].role == "assistant"
        raw = episode.messages[-1].content or ""
        assert "<tool_call>" in raw or "</tool_call>" in raw
        assert episode.turns == len(assistant) - 1
    else:
        assert episode.termination in ("done", "max_turns") and episode.error is None
        assert episode.turns == len(assistant) >= 1
        # every parsed tool call was answered by the environment with its id
        answered = {m.tool_call_id for m in episode.messages if m.role == "tool"}
        assert {c.id for c in episode.tool_calls} == answered
        assert (episode.termination == "done") == (not assistant[-1].tool_calls)
    assert episode.success == (episode.reward == 1.0) == ("1234567" in [o.lstrip("#W") for o in env.looked_up])


async def test_a_tool_call_the_model_emits_is_parsed_and_executed(taught_model_dir: Path) -> None:
    env = OrderDesk()
    policy = LocalPolicy(taught_model_dir, temperature=0.0, max_new_tokens=40)
    episode = await agents_policy.run_episode(policy, env, GOOD_REQUEST, max_turns=1)

    assert (episode.termination, episode.turns, episode.error) == ("max_turns", 1, None)
    (call,) = episode.tool_calls
    assert (call.name, call.arguments) == ("get_order", {"order_id": "#W1234567"})
    assert episode.messages[2].role == "assistant" and episode.messages[2].content is None
    assert episode.messages[3].role == "tool" and episode.messages[3].tool_call_id == call.id
    assert env.looked_up == ["#W1234567"]
    assert (episode.reward, episode.success, episode.components) == (1.0, True, {"lookup": 1.0})


async def test_a_broken_tool_call_ends_the_episode_as_malformed_output(taught_model_dir: Path) -> None:
    env = OrderDesk()
    policy = LocalPolicy(taught_model_dir, temperature=0.0, max_new_tokens=40)
    episode = await agents_policy.run_episode(policy, env, BROKEN_REQUEST, max_turns=3)

    assert (episode.termination, episode.turns) == ("malformed_output", 0)
    assert "not valid JSON" in (episode.error or "")
    assert episode.messages[-1].role == "assistant"
    assert episode.messages[-1].content == TEACH[BROKEN_REQUEST].removesuffix(
        "<|im_end|>"
    )  # the raw text, kept for analysis
    assert (episode.reward, episode.success, env.steps) == (0.0, False, 0)
