"""The generator sees the analysis split only; the held-out split's openings travel to validation instead."""

from __future__ import annotations

from pathlib import Path

from synth_fixtures import analysed_run, store_at

from gapforge.agents.analysis.split import ensure_split, split_tasks
from gapforge.agents.synthesis.context import gather_context
from gapforge.agents.synthesis.generator import render_generator_prompt
from gapforge.envs.registry import make_env
from gapforge.store import LabelIn

CAP = "precondition_verification"


def test_heldout_episodes_never_reach_the_generator_even_when_labeled(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    shop = make_env("shop")
    families = {e.task_id: shop.task_family(e.task_id) for e in store.episodes(run)}  # as ensure_split reads them
    heldout = set(split_tasks(families, 0.5, 0).heldout)
    heldout_failed = [e.id for e in store.episodes(run, success=False) if e.task_id in heldout]
    assert heldout_failed
    # a held-out failure with more LACKING votes than any other episode: shown first when no split guards the door
    store.put_labels(run, 1, [LabelIn(heldout_failed[0], CAP, "LACKING", "held out")])
    store.put_labels(run, 2, [LabelIn(heldout_failed[0], CAP, "LACKING", "held out")])
    unguarded = gather_context(store, run, CAP, n_episodes=8, episode_chars=800)
    assert (
        unguarded.episodes[0].episode_id == heldout_failed[0] and unguarded.split_texts is None
    )  # check contamination skips
    split = ensure_split(store, run, fraction=0.5, seed=0)
    assert set(split.heldout) == heldout
    ctx = gather_context(store, run, CAP, n_episodes=8, episode_chars=800)
    assert ctx.episodes and {e.task_id for e in ctx.episodes} <= set(split.analysis)
    prompt = render_generator_prompt(ctx, 1, 3, None)
    heldout_openings = {t for texts in ctx.split_texts.heldout.values() for t in texts}
    analysis_openings = set(ctx.split_texts.analysis)
    assert set(ctx.split_texts.heldout) == {e.task_id for e in store.episodes(run) if e.task_id in split.heldout}
    for task in split.heldout:
        assert f"(task {task})" not in prompt
    leaked = [t for t in heldout_openings - analysis_openings if t in prompt]
    assert not leaked, leaked


def test_the_policy_and_result_formats_come_from_the_shown_episodes(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    ensure_split(store, run, fraction=0.5, seed=0)
    ctx = gather_context(store, run, CAP, n_episodes=2, episode_chars=800)
    shown = store.get_episode(ctx.episodes[0].episode_id)
    assert ctx.target.policy == shown.messages[0]["content"]
    assert ctx.result_formats and set(ctx.result_formats) <= {t["function"]["name"] for t in ctx.tools_in_episodes}
    assert all(not text.startswith("Error") for text in ctx.result_formats.values())
