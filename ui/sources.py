"""Where the viewer reads from: the store (read-only), the graph's checkpoints (read-only) and a few files in the
workspace (an adapter's `steps.jsonl` and metadata).

`Sources` opens the store on first use and again on each request until it exists, so a viewer started before the first
run shows it as soon as it is there. Nothing here writes.
"""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapforge.store.reader import StoreReader

ADAPTER_METADATA = "gapforge_adapter.json"  # training/ writes it beside the kept checkpoint
STEPS_LOG = "steps.jsonl"  # training/ writes one line per GRPO step in the adapter's job directory


@dataclass(frozen=True)
class UiSettings:
    store_url: str
    checkpoint_path: Path  # the SQLite checkpoint file (unused when the store is PostgreSQL)
    workspace: Path
    poll_s: float = 2.0  # how often a page with a running run refreshes its live parts
    page_size: int = 50
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class RunSnapshot:
    """A run's graph state at its last checkpoint (empty when it has none yet)."""

    values: dict[str, Any] = field(default_factory=dict)
    next: tuple[str, ...] = ()
    interrupts: tuple[Any, ...] = ()

    @property
    def paused_for_review(self) -> bool:
        return self.next == ("review",) and bool(self.interrupts)


class Sources:
    def __init__(self, settings: UiSettings) -> None:
        self.settings = settings
        self._reader: StoreReader | None = None
        self._lock = threading.Lock()
        self._graph: Any = None  # the compiled graph over a read-only checkpointer, once there are checkpoints
        self._graph_lock = asyncio.Lock()
        self._stack = AsyncExitStack()

    @property
    def store(self) -> StoreReader:
        """The read-only store; NoStore (shown as a page) while there is none yet."""
        with self._lock:
            if self._reader is None:
                self._reader = StoreReader(self.settings.store_url)
            return self._reader

    async def aclose(self) -> None:
        await self._stack.aclose()
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    async def graph(self) -> Any:
        """The graph over the checkpoints (read-only), or None while there are none yet."""
        async with self._graph_lock:
            if self._graph is None:
                from gapforge.graph.checkpoint import open_checkpoints_read_only

                stack = AsyncExitStack()
                saver = await stack.enter_async_context(
                    open_checkpoints_read_only(self.settings.store_url, self.settings.checkpoint_path)
                )
                if saver is None:
                    await stack.aclose()
                    return None
                from gapforge.graph.graph import build_graph

                self._graph = build_graph(saver)
                self._stack.push_async_callback(stack.aclose)
            return self._graph

    async def snapshot(self, run_id: str) -> RunSnapshot:
        graph = await self.graph()
        if graph is None:
            return RunSnapshot()
        from gapforge.graph.runner import thread_config

        snap = await graph.aget_state(thread_config(run_id))
        return RunSnapshot(dict(snap.values or {}), tuple(snap.next), tuple(i.value for i in snap.interrupts or ()))

    async def history(self, run_id: str) -> list[Any]:
        graph = await self.graph()
        if graph is None:
            return []
        from gapforge.graph.inspect import history

        return await history(graph, run_id)

    def adapter_dir(self, run_id: str, name: str, path: str) -> Path | None:
        """The adapter's job directory: `<workspace>/adapters/RUN/NAME`, else two levels above the
        kept checkpoint (`.../NAME/evals/step-N`)."""
        candidates = [self.settings.workspace / "adapters" / run_id / name]
        if path:
            kept = Path(path)
            candidates.append(kept.parents[1] if len(kept.parents) > 1 else kept)
        return next((c for c in candidates if (c / STEPS_LOG).is_file()), None)

    def adapter_steps(self, run_id: str, name: str, path: str) -> list[dict[str, Any]]:
        """The GRPO steps.jsonl of an adapter (one dict per step); [] when there is none."""
        rows: list[dict[str, Any]] = []
        if (where := self.adapter_dir(run_id, name, path)) is None:
            return rows
        for line in (where / STEPS_LOG).read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def adapter_metadata(self, run_id: str, name: str, path: str) -> dict[str, Any] | None:
        """The metadata training wrote beside the kept checkpoint (base model hash, env, tasks, versions)."""
        if not path:
            return None
        kept, job = Path(path), self.settings.workspace / "adapters" / run_id / name
        file = next((f for f in (kept, job / "evals" / kept.name) if (f / ADAPTER_METADATA).is_file()), None)
        if file is None:
            return None
        try:
            data = json.loads((file / ADAPTER_METADATA).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None
