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
from gapforge.run_stages import RealStages
from gapforge.run_stages import open_stages as real_open_stages
from gapforge.wiring import open_store
from graph.context import Cost, RolloutsDone, StageUnavailable
from tests.graph.conftest import write_config


class PlantedAnalysisStages(RealStages):
    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        from agents.planted_policy import collect_planted

        await asyncio.to_thread(collect_planted, self.store, run_id, samples=2, seed=0)
        eps = await asyncio.to_thread(self.store.episodes, run_id)
        return RolloutsDone(len(eps), sum(e.success for e in eps), len(eps), Cost(policy_rollouts=len(eps)))

    async def synthesize(self, run_id: str, capability: str, attempt: int) -> Any:
        raise StageUnavailable("not under test here")

    async def evaluate(self, run_id: str, capabilities: list[str]) -> Any:
        raise StageUnavailable("not under test here")

    async def report(self, run_id: str) -> Any:
        raise StageUnavailable("not under test here")


def open_stages(cfg: Any, store: Any, progress: Any = None) -> AbstractAsyncContextManager[RealStages]:
    return real_open_stages(cfg, store, progress, stages_cls=PlantedAnalysisStages)


def test_real_analysis_in_the_graph_then_fork_with_another_delta(tmp_path: Path) -> None:
    cfg_path = write_config(tmp_path / "c.yaml", tmp_path / "ws", analysis={"passes": 3, "bootstrap": 50})
    runner = CliRunner()
    out = runner.invoke(app, ["run", "--config", str(cfg_path), "--stages", f"{__name__}:open_stages"])
    assert out.exit_code == 0, out.output
    rid = out.output.split()[1]
    with open_store(load_config(cfg_path)) as store:
        retained = {c.name for c in store.capabilities(rid, retained=True)}
        rejected = {c.name for c in store.capabilities(rid, retained=False)}
        calls_before = len(store.label_calls(rid))
    assert "precondition_verification" in retained
    assert rejected, "the decoy must be rejected by the statistics"
    assert "synthesize (precondition_verification): status=unavailable" in out.output

    hist = runner.invoke(app, ["history", rid, "--config", str(cfg_path)]).output
    rows = [[c.strip() for c in line.split("│")] for line in hist.splitlines() if line.count("│") > 6]
    # after labeling pass 0, before pass 1: the fork labels passes 1-2 again -> all from the copied cache
    mid_labeling = next(r[2] for r in rows if r[3] == "label" and r[6] == "label")
    out = runner.invoke(app, ["fork", rid, "--checkpoint", mid_labeling, "--set", "analysis.delta=0.99", "--config", str(cfg_path)])
    assert out.exit_code == 0, out.output
    fid = out.output.split()[1]
    assert "label_calls" in out.output.splitlines()[1]  # the labeling cache came along
    assert "label: done" in out.output  # passes 1-2 ran again in the fork, answered by the copied cache
    with open_store(load_config(cfg_path)) as store:
        assert len(store.label_calls(fid)) == calls_before  # 0 new labeling calls
        assert {c.name for c in store.capabilities(fid, retained=True)} != retained  # another δ, another set
        assert {c.name for c in store.capabilities(rid, retained=True)} == retained  # the parent is untouched
