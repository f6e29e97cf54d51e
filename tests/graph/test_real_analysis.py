"""The graph with the REAL analysis stage (discover, label x R, select) on honest shop episodes of
the planted-deficit policy: the planted capability is retained, the decoy rejected; the stages
after select are switched off here (their own tests and the demo cover them)."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.graph.context import Cost, RolloutsDone, StageFailed
from gapforge.run_session import RunOptions, create_run, drive_run, fork_run
from gapforge.stages import RunStages
from gapforge.stages import open_stages as real_open_stages
from gapforge.wiring import open_store
from tests.graph.conftest import write_config


class PlantedAnalysisStages(RunStages):
    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        from tests.fakes.planted_policy import collect_planted

        await asyncio.to_thread(collect_planted, self.store, run_id, samples=2, seed=0)
        eps = await asyncio.to_thread(self.store.episodes, run_id)
        return RolloutsDone(len(eps), sum(e.success for e in eps), len(eps), Cost(policy_rollouts=len(eps)))

    async def synthesize(self, run_id: str, capability: str, attempt: int) -> Any:
        raise StageFailed("not under test here")

    async def evaluate(self, run_id: str, capabilities: list[str]) -> Any:
        raise StageFailed("not under test here")

    async def report(self, run_id: str, values: dict | None = None) -> Any:
        raise StageFailed("not under test here")


def open_stages(cfg: Any, store: Any, progress: Any = None) -> AbstractAsyncContextManager[RunStages]:
    return real_open_stages(cfg, store, progress, stages_cls=PlantedAnalysisStages)


def test_real_analysis_in_the_graph_then_fork_with_another_delta(tmp_path: Path, tiny_model_dir: Path) -> None:
    # The stage set is passed in-process here (a test's subclass); a run started from the CLI gets it from its config.
    policy = {"kind": "local", "local_path": str(tiny_model_dir)}
    cfg_path = write_config(
        tmp_path / "c.yaml", tmp_path / "ws", analysis={"passes": 3, "bootstrap": 50}, stages="real", policy=policy
    )
    cfg = load_config(cfg_path)
    with open_store(cfg) as store:
        rid = create_run(store, "trace", "run", cfg, RunOptions())
        outcome = drive_run(cfg, store, rid, RunOptions(), fresh=True, open_stages=open_stages)
        retained = {c.name for c in store.capabilities(rid, retained=True)}
        rejected = {c.name for c in store.capabilities(rid, retained=False)}
        calls_before = len(store.label_calls(rid))
    assert "precondition_verification" in retained
    assert rejected, "the decoy must be rejected by the statistics"
    assert outcome.values["capabilities"]["precondition_verification"]["status"] == "failed"

    runner = CliRunner()
    hist = runner.invoke(app, ["history", rid, "--config", str(cfg_path)]).output
    rows = [[c.strip() for c in line.split("│")] for line in hist.splitlines() if line.count("│") > 6]
    # after labeling pass 0, before pass 1: the fork labels passes 1-2 again -> all from the copied cache
    mid_labeling = next(r[2] for r in rows if r[3] == "label" and r[6] == "label")
    with open_store(cfg) as store:
        fid, fork_cfg, options, copied = fork_run(cfg, store, rid, mid_labeling, ["analysis.delta=0.99"])
        assert copied.get("label_calls")  # the labeling cache came along
        forked = drive_run(fork_cfg, store, fid, options, fresh=False, open_stages=open_stages)
        assert (
            forked.values["stages"]["label"] == "done"
        )  # passes 1-2 ran again in the fork, answered by the copied cache
        assert len(store.label_calls(fid)) == calls_before  # 0 new labeling calls
        assert {c.name for c in store.capabilities(fid, retained=True)} != retained  # another δ, another set
        assert {c.name for c in store.capabilities(rid, retained=True)} == retained  # the parent is untouched


def test_an_excluded_capability_reaches_the_graph_state_as_excluded(tmp_path: Path, tiny_model_dir: Path) -> None:
    """analysis.exclude through the real select stage into the graph's state: the planted capability the vote retains
    is `excluded` there (not `rejected`, not `deferred`) and not among the run's retained capabilities."""
    policy = {"kind": "local", "local_path": str(tiny_model_dir)}
    cfg_path = write_config(
        tmp_path / "c.yaml",
        tmp_path / "ws",
        stages="real",
        policy=policy,
        analysis={"passes": 1, "bootstrap": 0, "exclude": ["precondition_verification"]},
    )
    cfg = load_config(cfg_path)
    with open_store(cfg) as store:
        rid = create_run(store, "trace", "run", cfg, RunOptions())
        outcome = drive_run(cfg, store, rid, RunOptions(), fresh=True, open_stages=open_stages)
        retained = {c.name for c in store.capabilities(rid, retained=True)}
    assert outcome.values["capabilities"]["precondition_verification"]["status"] == "excluded"
    assert "precondition_verification" not in retained and "precondition_verification" not in outcome.values["retained"]
