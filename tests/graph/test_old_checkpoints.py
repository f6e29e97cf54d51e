"""Checkpoints written before the folders moved under gapforge. load with today's graph.

tests/data/old_checkpoints/checkpoints.sqlite.gz was written by `gapforge run` with the fake stage services when the
packages were top-level (`graph`, `agents`, ...): one finished run, and one stopped by an endpoint outage after
collect_rollouts (its error is a pending write). The graph's state holds plain values only (ids, statuses, numbers,
LangGraph's own Send packets), so no stored blob names a module of ours and no alias table is needed; this test
fails if that stops being true for what was stored then.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

from gapforge.graph.checkpoint import open_checkpointer
from gapforge.graph.graph import build_graph

DATA = Path(__file__).resolve().parents[1] / "data" / "old_checkpoints" / "checkpoints.sqlite.gz"
FINISHED, STOPPED = "r-20261127-619690", "r-20261127-2475fb"
PLAIN = (dict, list, tuple, str, int, float, bool, type(None))


def _unpack(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.sqlite"
    with gzip.open(DATA, "rb") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _ours(value: Any) -> list[str]:
    """Objects in a decoded value that are not plain data or LangGraph's own (their classes' modules)."""
    if isinstance(value, dict):
        return [m for k, v in value.items() for m in _ours(k) + _ours(v)]
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in _ours(v)]
    if isinstance(value, PLAIN):
        return []
    module = type(value).__module__
    return [] if module.startswith("langgraph") else [f"{module}.{type(value).__qualname__}"]


async def test_runs_checkpointed_before_the_namespace_load(tmp_path: Path) -> None:
    path = _unpack(tmp_path)
    async with open_checkpointer(None, path) as saver:
        graph = build_graph(saver)
        done = await graph.aget_state({"configurable": {"thread_id": FINISHED}})
        assert done.next == ()
        assert done.values["stages"]["report"] == "done" and "failed" not in done.values["stages"].values()
        assert sorted(done.values["capabilities"]) == ["alpha", "beta", "gamma"]
        assert done.values["capabilities"]["beta"]["status"] == "trained"
        history = [s async for s in graph.aget_state_history({"configurable": {"thread_id": FINISHED}})]
        assert len(history) == 13  # the root graph's (the capability subgraphs' are in namespaces of their own)

        stopped = await graph.aget_state({"configurable": {"thread_id": STOPPED}})
        assert stopped.next == ("discover",)
        assert stopped.values["stages"] == {"collect_rollouts": "done"}
        assert "LLM endpoint" in str(stopped.tasks[0].error)

        stored = []
        for thread in (FINISHED, STOPPED):
            async for item in saver.alist({"configurable": {"thread_id": thread}}):
                stored += [item.checkpoint, item.metadata, [w[2] for w in item.pending_writes or []]]
        assert stored and _ours(stored) == []
