"""A graph run's lifecycle, without printing: start, drive (lease, status, event loop), resume, fork.

The run's effective config and its graph options (review on/off, the parent of a fork)
are stored with the run, so `gapforge run --resume RUN` rebuilds the same run whoever
started it (`gapforge run`, `gapforge demo`, `gapforge fork`). Which stage services
drive it is part of that config (`stages: real | fixtures`; fixtures: the test suite's fakes), never a code path in a row.
The CLI (cli_run.py, demo.py) only prints what these functions return or raise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapforge.config import GapforgeConfig, check_run_config
from gapforge.errors import GapforgeError, UsageError
from gapforge.run_config import load_tree
from gapforge.run_progress import keeping_progress, note_error, progress_path

if TYPE_CHECKING:
    from gapforge.store import Store

RUN_KINDS = ("trace", "demo")
OpenStages = Callable[..., Any]  # (cfg, store, progress) -> async context manager -> graph.context.Stages


@dataclass(frozen=True)
class RunOptions:
    """The graph options stored with a run (beside its config)."""

    review: bool = False
    forked_from: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"review": self.review, "forked_from": self.forked_from}


def run_record(command: str, cfg: GapforgeConfig, options: RunOptions) -> dict[str, Any]:
    return {"command": command, "config": cfg.dump(), "graph": options.as_dict()}


def config_from_record(
    record: dict[str, Any], overrides: list[str] | None = None, *, store_url: str | None = None
) -> GapforgeConfig:
    """The stored effective config (+ overrides), loaded through the one loader (secrets from env vars again).
    `store_url`: the store the record was read from (the stored one has its password masked)."""
    stored = record.get("config")
    if not isinstance(stored, dict):
        raise UsageError("this run stores no config (it was not started by `gapforge run`): start a new run")
    return load_tree({**stored, "store": {**(stored.get("store") or {}), "url": store_url}}, overrides)


def options_from_record(record: dict[str, Any]) -> RunOptions:
    graph = record.get("graph")
    if not isinstance(graph, dict):
        raise UsageError(
            "this run was not made by `gapforge run` (no graph options stored): start one with `gapforge run`"
        )
    return RunOptions(review=bool(graph.get("review")), forked_from=graph.get("forked_from"))


def get_run_record(store: Store, run_id: str) -> tuple[dict[str, Any], str]:
    row = store.get_run(run_id)
    if row.kind not in RUN_KINDS:
        raise UsageError(
            f"run {run_id!r} is a {row.kind!r} run, not a graph run: read its episodes with `gapforge rollouts show "
            f"{run_id}`; this command takes the runs `gapforge runs --kind trace --kind demo` lists"
        )
    return dict(row.config), row.status


def stages_for(cfg: GapforgeConfig) -> OpenStages:
    """The stage services the config names: the real ones, or the test suite's deterministic fakes (`stages: fixtures`,
    tests/fakes/fake_stages.py: the graph's lifecycle tests kill and resume real `gapforge run` processes, so a stored
    config must be able to name them). The fakes are not installed: they import from a source checkout only."""
    if cfg.stages == "fixtures":
        try:
            from tests.fakes.fake_stages import open_stages as fake_stages
        except ModuleNotFoundError as e:
            if e.name not in ("tests", "tests.fakes", "tests.fakes.fake_stages"):
                raise
            raise UsageError(
                "stages: fixtures names the test suite's fake stage services (tests/fakes/fake_stages.py), "
                "found only when running from a gapforge source checkout's root: set stages: real"
            ) from None
        return fake_stages
    from gapforge.stages import open_stages

    return open_stages


def create_run(
    store: Store, kind: str, command: str, cfg: GapforgeConfig, options: RunOptions, run_id: str | None = None
) -> str:
    """Store a new graph run with its config and options; a config that cannot complete a run is refused first."""
    if cfg.stages == "real":
        check_run_config(cfg)
    stages_for(
        cfg
    )  # a stage set that does not load here (the fakes outside a checkout) is refused before the run exists
    return store.create_run(kind, run_record(command, cfg, options), run_id)


@dataclass(frozen=True)
class Resumed:
    cfg: GapforgeConfig
    options: RunOptions
    command: str  # run | demo | fork: what started it


def resume_plan(store: Store, run_id: str, store_url: str | None, overrides: list[str] | None = None) -> Resumed:
    """How to resume `run_id`: its stored config (+ `overrides`: where it executes, `executor.*`, is the resuming
    invocation's choice), options and the command that started it."""
    record, _status = get_run_record(store, run_id)
    return Resumed(
        config_from_record(record, overrides, store_url=store_url),
        options_from_record(record),
        str(record.get("command") or "run"),
    )


# --- driving -----------------------------------------------------------------------------------------------------------


@asynccontextmanager
async def open_graph(cfg: GapforgeConfig) -> AsyncIterator[Any]:
    """The compiled graph over the checkpointer of `cfg`'s store."""
    from gapforge.graph.checkpoint import open_checkpointer
    from gapforge.graph.graph import build_graph

    async with open_checkpointer(cfg.store.url, cfg.checkpoint_path) as saver:
        yield build_graph(saver)


def drive_run(
    cfg: GapforgeConfig,
    store: Store,
    run_id: str,
    options: RunOptions,
    *,
    fresh: bool,
    on_event: Callable[[Any], None] | None = None,
    log: Callable[[str, str], None] | None = None,
    open_stages: OpenStages | None = None,
) -> Any:
    """Run or resume `run_id` under its lease, its status kept true (running, then done | paused, or interrupted |
    incomplete | failed as the exception that stopped it goes up). Returns graph.runner.Outcome."""
    from gapforge.graph.context import GraphContext, Stages
    from gapforge.graph.runner import drive, initial_state

    stages = open_stages or stages_for(cfg)
    progress = keeping_progress(cfg, run_id, log)

    async def go() -> Any:
        async with open_graph(cfg) as graph, stages(cfg, store, progress) as bound:
            if not isinstance(bound, Stages):  # the repair loop alone (graph.capability.repair) needs two of them
                raise TypeError(f"{type(bound).__name__} does not implement graph.context.Stages")
            ctx = GraphContext(
                stages=bound,
                repeats=cfg.analysis.passes,
                max_attempts=cfg.synthesis.max_attempts,
                review=options.review,
            )
            return await drive(graph, run_id, ctx, start=initial_state(run_id) if fresh else None, on_event=on_event)

    # one working process per run (a second one: RunBusy)
    with store.lease(run_id, "run", ttl_s=cfg.store.lease_ttl_s):
        store.set_run_status(run_id, "running")
        try:
            outcome = asyncio.run(go())
        except KeyboardInterrupt:
            store.set_run_status(run_id, "interrupted")
            raise
        except (
            GapforgeError
        ) as e:  # infrastructure (an endpoint or the sandbox down past its retries, a full disk): stored work
            note_error(cfg, run_id, error_line(e))
            store.set_run_status(
                run_id, "incomplete" if e.infrastructure else "failed"
            )  # kept, nothing blamed: incomplete
            raise
        except BaseException as e:
            note_error(cfg, run_id, error_line(e))
            store.set_run_status(run_id, "failed")
            raise
        store.set_run_status(run_id, "paused" if outcome.status == "paused" else "done")
    if outcome.status != "paused":
        progress_path(cfg, run_id).unlink(missing_ok=True)
    return outcome


def error_line(e: BaseException) -> str:
    """What stopped a run, in one line as `gapforge state` shows it (credentials in URLs masked)."""
    from gapforge.store.redact import redact

    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return redact(f"{type(e).__name__}: {first}"[:500]).rstrip(": ")


def fork_run(
    cfg: GapforgeConfig,
    store: Store,
    run_id: str,
    checkpoint: str,
    overrides: list[str] | None,
    new_id: str | None = None,
) -> tuple[str, GapforgeConfig, RunOptions, dict[str, int]]:
    """A new run continuing `run_id` from `checkpoint` with changed settings, reusing its stored work:
    (new run id, its config, its options, rows copied per table). Drive it with `drive_run(..., fresh=False)`."""
    from gapforge.fork_rows import copy_shared_work
    from gapforge.graph.inspect import ForkError, fork, fork_point, shared_work

    record, _ = get_run_record(store, run_id)
    new_cfg = config_from_record(record, overrides, store_url=cfg.store.url)
    options = RunOptions(
        review=options_from_record(record).review, forked_from={"run": run_id, "checkpoint": checkpoint}
    )

    async def go() -> tuple[str, dict[str, int]]:
        async with open_graph(cfg) as graph:
            values = await fork_point(graph, run_id, checkpoint)
            made = create_run(store, "trace", "fork", new_cfg, options, new_id)
            copied = copy_shared_work(store, run_id, made, shared_work(values))
            await fork(graph, run_id, checkpoint, made)
            return made, copied

    try:
        made, copied = asyncio.run(go())
    except ForkError as e:
        raise UsageError(str(e)) from None
    return made, new_cfg, options, copied


def inspect_graph(cfg: GapforgeConfig, fn: Callable[[Any], Any]) -> Any:
    """`await fn(graph)` over the compiled graph of `cfg`'s store (runs, state, history, review)."""

    async def go() -> Any:
        async with open_graph(cfg) as graph:
            return await fn(graph)

    return asyncio.run(go())
