"""The collect stage splits the target's tasks before it plays (gapforge/stages/rollouts.py): every analysis-split task
`rollouts.samples` times, each held-out task once (its opening, for the contamination check), and the analysis then
reads the split the collection stored."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gapforge.agents.analysis.split import analysis_episodes, split_openings
from gapforge.config import load_config
from gapforge.stages import open_stages
from gapforge.store import Store

TASKS = ["shop-refusal-001", "shop-refusal-002", "shop-lookup-001", "shop-lookup-002"]


def _collect(tmp_path: Path, *settings: str) -> tuple[Store, str]:
    answers = tmp_path / "answers.yaml"
    answers.write_text('policy:\n  repeat: "Hello there"\n')
    cfg = load_config(
        None,
        [
            f"workspace={tmp_path / 'ws'}",
            "policy.kind=scripted",
            f"policy.scripted_path={answers}",
            "rollouts.env=shop",
            f"rollouts.tasks=[{', '.join(TASKS)}]",
            "rollouts.samples=3",
            "rollouts.max_turns=2",
            "analysis.split_fraction=0.5",
            *settings,
        ],
        environ={},
    )
    store = Store(cfg.store_url)
    run_id = store.create_run("trace", {"env": "shop"})

    async def collect() -> None:
        async with open_stages(cfg, store) as stages:
            await stages.collect_rollouts(run_id)

    asyncio.run(collect())
    return store, run_id


def test_analysis_tasks_are_played_samples_times_and_held_out_tasks_once(tmp_path: Path) -> None:
    store, run_id = _collect(tmp_path)
    with store:
        split = store.get_split(run_id)
        assert split is not None and len(split.analysis_tasks) == 2 and len(split.heldout_tasks) == 2
        per_task: dict[str, int] = {}
        for e in store.episodes(run_id):
            per_task[e.task_id] = per_task.get(e.task_id, 0) + 1
        assert per_task == {**dict.fromkeys(split.analysis_tasks, 3), **dict.fromkeys(split.heldout_tasks, 1)}
        # the analysis reads the stored split (same settings: no error) and only its own tasks' episodes
        shown = analysis_episodes(store, run_id, fraction=0.5, seed=0)
        assert sorted({e.task_id for e in shown}) == sorted(split.analysis_tasks) and len(shown) == 6
        texts = split_openings(store, run_id)  # every held-out task's opening is guarded
        assert texts is not None and sorted(texts.heldout) == sorted(split.heldout_tasks)


def test_held_out_tasks_are_played_as_often_as_the_rest_where_their_opening_may_vary() -> None:
    """An LLM user may write its own opening, and a user's class may draw it: every sample's is guarded then. A
    built-in target's scripted user opens every sample the same way: once is enough (the plans only)."""
    from gapforge.stages.rollouts import collect_plan

    def keys(env: str, *settings: str) -> list[tuple[str, int]]:
        cfg = load_config(None, ["rollouts.samples=3", *settings], environ={})
        return sorted(collect_plan(cfg, "r", env, TASKS, heldout=TASKS[2:]).keys())

    every = sorted((t, s) for t in TASKS for s in range(3))
    assert keys("shop", "rollouts.user=llm") == every
    assert keys("my_env.py:MyEnv") == every
    assert keys("shop") == sorted([(t, s) for t in TASKS[:2] for s in range(3)] + [(t, 0) for t in TASKS[2:]])


def test_evaluate_refuses_a_run_that_is_collected_but_not_analysed(tmp_path: Path) -> None:
    """The collection stores the split, but only the analysis makes a run something to evaluate: one line, exit 2."""
    from typer.testing import CliRunner

    from gapforge.cli import app

    store, run_id = _collect(tmp_path)
    store.close()
    res = CliRunner().invoke(app, ["evaluate", run_id, "--set", f"workspace={tmp_path / 'ws'}"])
    assert res.exit_code == 2, res.output
    assert f"run {run_id} is not analysed yet" in res.output and f"gapforge analyze {run_id}" in res.output
