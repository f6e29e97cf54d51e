"""A graph run's lifecycle, without printing: record, config, checkpointer, stage services.

The run's effective config and its graph options (review on/off, which stage
services, the parent of a fork) are stored with the run in the store, so
`gapforge run --resume RUN` rebuilds the exact same run whoever started it
(`gapforge run`, `gapforge demo`, `gapforge fork`), from the same directory.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gapforge.cli_common import UsageError
from gapforge.config import GapforgeConfig, load_config

REAL_STAGES = "gapforge.run_stages:open_stages"
RUN_KINDS = ("trace", "demo")


@dataclass(frozen=True)
class RunOptions:
    """The graph options stored with a run (beside its config)."""

    review: bool = False
    stages: str = REAL_STAGES  # "module:callable" -> async context manager (cfg, store, progress) -> Stages
    forked_from: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"review": self.review, "stages": self.stages, "forked_from": self.forked_from}


def run_record(command: str, cfg: GapforgeConfig, options: RunOptions) -> dict[str, Any]:
    return {"command": command, "config": cfg.dump(), "graph": options.as_dict()}


def config_from_record(record: dict[str, Any], overrides: list[str] | None = None, *, store_url: str | None = None) -> GapforgeConfig:
    """The stored effective config (+ overrides), loaded through the one loader (secrets from env vars again).
    `store_url`: the store the record was read from (the stored one has its password masked)."""
    stored = record.get("config")
    if not isinstance(stored, dict):
        raise UsageError("this run has no stored config (made by an older gapforge): start a new run")
    stored = {**stored, "store": {**(stored.get("store") or {}), "url": store_url}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(stored, fh)
        path = Path(fh.name)
    try:
        return load_config(path, overrides or [])
    finally:
        path.unlink(missing_ok=True)


def options_from_record(record: dict[str, Any]) -> RunOptions:
    graph = record.get("graph")
    if not isinstance(graph, dict):
        raise UsageError("this run was not made by `gapforge run` (no graph options stored): start one with `gapforge run`")
    return RunOptions(review=bool(graph.get("review")), stages=str(graph.get("stages") or REAL_STAGES), forked_from=graph.get("forked_from"))


def load_stages_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"stage services {spec!r} cannot be loaded ({e}): use module:callable") from None


def get_run_record(store: Any, run_id: str) -> tuple[dict[str, Any], str]:
    row = store.get_run(run_id)
    if row.kind not in RUN_KINDS:
        raise UsageError(f"run {run_id!r} is a {row.kind!r} run, not a graph run: pick one listed by `gapforge runs`")
    return dict(row.config), row.status


@dataclass
class OpenRun:
    """Everything one command needs to drive or inspect runs."""

    cfg: GapforgeConfig
    store: Any
    graph: Any
    open_context: Callable[..., Any]  # (options, run_cfg, progress) -> async context manager -> GraphContext


@asynccontextmanager
async def open_run(cfg: GapforgeConfig, store: Any) -> AsyncIterator[OpenRun]:
    """Checkpointer + compiled graph for the store of `cfg`; stage services opened per run on demand."""
    from graph.checkpoint import open_checkpointer
    from graph.graph import build_graph

    async with open_checkpointer(cfg.store.url, cfg.checkpoint_path) as saver:
        graph = build_graph(saver)

        @asynccontextmanager
        async def open_context(
            options: RunOptions, run_cfg: GapforgeConfig | None = None, progress: Callable[[str, str], None] | None = None
        ) -> AsyncIterator[Any]:
            from graph.context import GraphContext

            use = run_cfg or cfg
            async with AsyncExitStack() as stack:
                stages = await stack.enter_async_context(load_stages_factory(options.stages)(use, store, progress))
                yield GraphContext(
                    stages=stages,
                    repeats=use.analysis.passes,
                    max_attempts=use.synthesis.max_attempts,
                    review=options.review,
                )

        yield OpenRun(cfg, store, graph, open_context)
