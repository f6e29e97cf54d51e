"""A run's checkpoints hold plain values only (ids, statuses, numbers, LangGraph's own packets): no stored blob names a
class of ours, so moving or renaming a module never makes an earlier checkpoint unreadable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapforge.config import load_config
from gapforge.graph.checkpoint import open_checkpointer
from gapforge.graph.context import GraphContext, StageFailed
from gapforge.graph.graph import build_graph
from gapforge.graph.runner import drive, initial_state
from gapforge.wiring import open_store
from tests.fakes.fake_stages import FakeStages
from tests.graph.conftest import write_config

PLAIN = (dict, list, tuple, str, int, float, bool, type(None))


def ours(value: Any) -> list[str]:
    """The objects in a decoded checkpoint value that are neither plain data nor LangGraph's own (their classes)."""
    if isinstance(value, dict):
        return [m for k, v in value.items() for m in ours(k) + ours(v)]
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in ours(v)]
    if isinstance(value, PLAIN):
        return []
    module = type(value).__module__
    return [] if module.startswith("langgraph") else [f"{module}.{type(value).__qualname__}"]


class FailsToEvaluate(FakeStages):  # a failed stage: its error is stored too
    async def evaluate(self, run_id: str, capabilities: list[str], **kwargs: Any):
        raise StageFailed("no held-out split stored with the run")


async def test_a_finished_run_and_a_failed_one_store_plain_values_only(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "c.yaml", tmp_path / "ws"), [], environ={})
    store = open_store(cfg)
    stored: list[Any] = []
    async with open_checkpointer(None, tmp_path / "checkpoints.sqlite") as saver:
        for stages_cls in (FakeStages, FailsToEvaluate):
            run_id = store.create_run("trace", {})
            ctx = GraphContext(stages=stages_cls(cfg, store), repeats=2, max_attempts=3)
            outcome = await drive(build_graph(saver), run_id, ctx, start=initial_state(run_id))
            assert outcome.status == "done"
            async for item in saver.alist({"configurable": {"thread_id": run_id}}):
                stored += [item.checkpoint, item.metadata, [w[2] for w in item.pending_writes or []]]
    store.close()
    assert len(stored) > 20  # every step of both runs
    assert ours(stored) == []
    assert ours([{"x": ValueError("a class of ours would be found")}]) == ["builtins.ValueError"]  # the check sees one
