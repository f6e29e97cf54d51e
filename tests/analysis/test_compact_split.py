"""Compaction (deterministic, indices kept, cut markers, budget) and the task split."""

from __future__ import annotations

import pytest

from gapforge.agents.analysis.compact import ByteEstimate, compact_episode, make_token_counter
from gapforge.agents.analysis.split import ensure_split, split_tasks
from gapforge.agents.errors import AnalysisError
from gapforge.envs.shop.env import ShopEnv
from gapforge.store.rows import EpisodeRow


def episode(messages: list[dict], **kw) -> EpisodeRow:
    base = dict(
        id=7,
        run_id="r",
        env="shop",
        task_id="t1",
        sample=0,
        policy="p",
        messages=messages,
        reward=0.0,
        success=False,
        components={"db": 0.0, "communicate": 1.0},
        termination="done",
        error=None,
        turns=2,
        timings={},
        task_family="policy_refusal",
        created_at=None,
    )
    return EpisodeRow(**(base | kw))


MESSAGES = [
    {"role": "system", "content": "policy " * 200},
    {"role": "user", "content": "cancel my order"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "name": "cancel_pending_order", "arguments": {"order_id": "#W1"}}],
    },
    {
        "role": "tool",
        "name": "cancel_pending_order",
        "content": "Error: order #W1 is 'delivered'" + " x" * 500,
        "tool_call_id": "c",
    },
    {"role": "assistant", "content": "I have submitted the cancellation."},
]


def test_compaction_keeps_indices_calls_errors_and_cuts_visibly() -> None:
    comp = compact_episode(episode(MESSAGES), ByteEstimate(), budget_tokens=3000, max_value_chars=200)
    text = comp.text
    assert "### episode 7" in text and "FAILURE" in text and "communicate=1 db=0" in text
    assert '[2] assistant: CALL cancel_pending_order({"order_id": "#W1"})' in text
    assert "[3] tool cancel_pending_order: Error: order #W1 is 'delivered'" in text
    assert "[cut " in text and comp.cut_values >= 1
    assert "policy policy" not in text  # the shared system prompt is shown once by the prompt, not per episode
    assert comp == compact_episode(episode(MESSAGES), ByteEstimate(), budget_tokens=3000, max_value_chars=200)


def test_compaction_fits_the_budget_by_cutting_then_dropping_middle_messages() -> None:
    long = MESSAGES + [{"role": "user", "content": f"turn {i} " + "y" * 300} for i in range(40)]
    comp = compact_episode(episode(long), ByteEstimate(), budget_tokens=400, max_value_chars=400)
    assert comp.tokens <= 400 and comp.dropped_messages > 0
    assert "messages omitted to fit the budget" in comp.text
    assert "[1] user: cancel my order" in comp.text and f"[{len(long) - 1}] user:" in comp.text


def test_token_counter_settings(tmp_path) -> None:
    assert make_token_counter("auto").name.startswith("estimate")
    with pytest.raises(AnalysisError, match="no tokenizer.json"):
        make_token_counter(str(tmp_path))


def test_split_is_deterministic_stratified_and_disjoint() -> None:
    env = ShopEnv()
    families = {t: env.task_family(t) for t in env.task_ids()}
    a = split_tasks(families, 0.5, seed=3)
    assert a == split_tasks(families, 0.5, seed=3) and a != split_tasks(families, 0.5, seed=4)
    assert not set(a.analysis) & set(a.heldout) and set(a.analysis) | set(a.heldout) == set(families)
    for fam in set(families.values()):
        n = sum(f == fam for f in families.values())
        assert sum(families[t] == fam for t in a.analysis) == round(n * 0.5)
    assert len(split_tasks({"x": "f", "y": "f"}, 0.99, 0).heldout) == 1  # at least one held out


def test_stored_split_is_reused_and_other_settings_refused(planted_store) -> None:
    first = ensure_split(planted_store, "r-analysis", fraction=0.5, seed=0)
    assert planted_store.get_split("r-analysis").heldout_tasks == list(first.heldout)
    assert ensure_split(planted_store, "r-analysis", fraction=0.5, seed=0) == first
    with pytest.raises(AnalysisError, match="already has a task split"):
        ensure_split(planted_store, "r-analysis", fraction=0.7, seed=0)
