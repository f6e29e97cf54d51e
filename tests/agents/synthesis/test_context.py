"""The generator's inputs from the store, and the recorded answers keyed by capability + attempt."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from synth_fixtures import analysed_run, store_at

from gapforge.agents.errors import ModelError
from gapforge.agents.llm import structured_call
from gapforge.agents.synthesis.context import compact_episode, gather_context
from gapforge.agents.synthesis.generator import GeneratedEnv
from gapforge.agents.synthesis.recorded import recorded_synthesis_model
from gapforge.store import LabelIn


def test_context_takes_the_most_often_lacking_failed_episodes(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    failed = sorted({lab.episode_id for lab in store.labels(run, capability="precondition_verification")})
    success = store.episodes(run, success=True)[0].id
    store.put_labels(
        run,
        1,
        [
            LabelIn(failed[3], "precondition_verification", "LACKING", "second pass"),
            LabelIn(success, "precondition_verification", "LACKING", "a success, never shown"),
        ],
    )
    ctx = gather_context(store, run, "precondition_verification", n_episodes=2, episode_chars=800)
    assert [e.episode_id for e in ctx.episodes] == [
        failed[3],
        failed[0],
    ]  # 2 votes first, then by id; successes skipped
    assert "second pass" in ctx.episodes[0].text and len(ctx.episodes[0].text) < 1200
    assert ctx.target.name == "shop" and "Shop customer-service policy" in ctx.target.policy
    assert {t["function"]["name"] for t in ctx.tools_in_episodes} <= set(ctx.episodes[0].tools_used) | set(
        ctx.episodes[1].tools_used
    )
    assert ctx.gap == pytest.approx(0.7) and "mean over 1 labeling pass" in ctx.statistics()


def test_no_lacking_episode_is_a_clear_error(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    store.put_capability(run, "decoy", definition="never lacking")
    with pytest.raises(LookupError, match="no failed analysis-split episode labeled LACKING"):
        gather_context(store, run, "decoy", n_episodes=2, episode_chars=800)
    with pytest.raises(LookupError, match="not stored"):
        gather_context(store, run, "nope", n_episodes=2, episode_chars=800)


def test_compact_episode_drops_the_system_prompt_and_keeps_calls() -> None:
    text = compact_episode(
        [
            {"role": "system", "content": "POLICY"},
            {"role": "user", "content": "hi " * 200},
            {"role": "assistant", "tool_calls": [{"name": "get_order_details", "arguments": {"order_id": "#W1"}}]},
        ],
        ["skipped the status check"],
        max_chars=2000,
    )
    assert "POLICY" not in text and 'get_order_details({"order_id": "#W1"})' in text and "..." in text
    assert text.endswith("- skipped the status check")


def test_recorded_answers_follow_the_attempt_in_the_prompt() -> None:
    model = recorded_synthesis_model()
    ask = lambda cap, n: structured_call(
        model,
        [HumanMessage(f"Capability: {cap}\nAttempt: {n} of 5\n")],
        GeneratedEnv,
        prompt_name="synthesis_generator",
    )
    second, first = ask("precondition_verification", 2), ask("precondition_verification", 1)
    assert '"id": order["order_id"]' in first.code and '"id": order["order_id"]' not in second.code
    assert (
        ask("multi_step_task_completion", 5).code == ask("multi_step_task_completion", 3).code
    )  # past the list: the last
    with pytest.raises(ModelError, match="no recorded 'synthesis_generator' answer for capability 'other'"):
        ask("other", 1)
