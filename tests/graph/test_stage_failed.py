"""A stage that cannot work on this run's data is recorded, never faked."""

from __future__ import annotations

from pathlib import Path

from langgraph.checkpoint.memory import InMemorySaver

from gapforge.config import load_config
from gapforge.graph.context import GraphContext, StageFailed
from gapforge.graph.graph import build_graph
from gapforge.graph.runner import drive, initial_state
from gapforge.wiring import open_store
from tests.fakes.fake_stages import FakeStages
from tests.graph.conftest import write_config


class NoTraining(FakeStages):
    async def train(self, run_id: str, capability: str):
        raise StageFailed("no accepted synthetic env module at ws/synthetic_envs/r/alpha.py")


class NothingToContrast(FakeStages):
    async def discover(self, run_id: str):
        raise StageFailed("run has no failed episode in its analysis split: nothing to contrast")


async def _run(tmp_path: Path, stages_cls: type[FakeStages]) -> dict:
    cfg = load_config(write_config(tmp_path / "c.yaml", tmp_path / "ws"), [], environ={})
    store = open_store(cfg)
    run_id = store.create_run("trace", {})
    ctx = GraphContext(stages=stages_cls(cfg, store), repeats=2, max_attempts=3)
    outcome = await drive(build_graph(InMemorySaver()), run_id, ctx, start=initial_state(run_id))
    store.close()
    assert outcome.status == "done"
    return outcome.values


async def test_a_failed_training_is_recorded_per_capability_and_downstream_skipped(tmp_path: Path) -> None:
    values = await _run(tmp_path, NoTraining)
    caps = values["capabilities"]
    assert caps["alpha"]["status"] == caps["beta"]["status"] == "failed"
    assert caps["alpha"]["error"].startswith("train: no accepted synthetic env module")
    assert values["stages"]["build_router"] == "skipped" and "no trained adapter" in values["notes"]["build_router"]
    assert "router" not in values
    assert values["evaluation"]["trace_routed"]["pass_rate"] == 0.5  # nothing routed: TRACE == base, honestly


async def test_a_stage_that_cannot_work_on_the_data_is_failed_with_its_reason(tmp_path: Path) -> None:
    values = await _run(tmp_path, NothingToContrast)
    assert values["stages"]["discover"] == "failed"
    assert "nothing to contrast" in values["notes"]["discover"]
    assert values["stages"]["label"] == values["stages"]["select"] == "skipped"
    assert values["retained"] == [] and values["stages"]["review"] == "skipped"
    assert values["stages"]["build_router"] == "skipped"
