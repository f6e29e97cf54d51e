"""`gapforge run / runs / state / history / fork / review`: the self-improvement graph.

Rendering only: the run lifecycle lives in gapforge/run_session.py, the graph
and its inspection in graph/.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.console import Console

from gapforge.errors import INCOMPLETE_ERRORS, INCOMPLETE_EXIT_CODE
from gapforge.cli_common import (
    USER_ERRORS,
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    fail,
    get_config,
    handle_errors,
)
from gapforge.run_session import (
    RunOptions,
    config_from_record,
    get_run_record,
    open_run,
    options_from_record,
    run_record,
)
from gapforge.wiring import connect_executor, executor_overrides
from gapforge.run_view import (
    ProgressView,
    capability_table,
    cost_table,
    evaluation_table,
    history_table,
    runs_table,
)

app = typer.Typer(help="The self-improvement graph: run, inspect, time-travel.")

StagesOpt = Annotated[str | None, typer.Option("--stages", hidden=True, help="module:callable opening the stage services (tests)")]


def register(root: typer.Typer) -> None:
    """Attach run, runs, state, history, fork and review as top-level commands."""
    root.add_typer(app)


def _table(table: Any) -> None:
    """Tables are wide: render at least 160 columns even when piped (rich defaults to 80)."""
    Console(width=max(console.width, 160) if not console.is_terminal else None).print(table)


def _store(cfg: Any) -> Any:
    from gapforge.wiring import open_store

    return open_store(cfg)


def drive_run(cfg: Any, store: Any, run_id: str, options: RunOptions, *, fresh: bool, last_line: bool = True) -> int:
    """Run or resume `run_id` with a live progress view; returns the exit code."""
    from graph.runner import drive, initial_state

    async def go() -> Any:
        with ProgressView(console) as view:
            async with open_run(cfg, store) as opened, opened.open_context(options, cfg, lambda w, t: view.log(f"    {w}: {t}", "dim")) as ctx:
                return await drive(opened.graph, run_id, ctx, start=initial_state(run_id) if fresh else None, on_event=view.event)

    with store.lease(run_id, "run", ttl_s=cfg.store.lease_ttl_s):  # one working process per run (a second one: one line naming the holder, exit 2)
        return _drive_leased(store, run_id, go, last_line)


def _drive_leased(store: Any, run_id: str, go: Any, last_line: bool) -> int:
    store.set_run_status(run_id, "running")
    resume = f"gapforge run --resume {run_id}"
    try:
        outcome = asyncio.run(go())
    except KeyboardInterrupt:
        store.set_run_status(run_id, "interrupted")
        fail(f"interrupted; continue with `{resume}`", code=130)
    except INCOMPLETE_ERRORS as e:  # an endpoint or the sandbox down past its retries: stored work kept, nothing blamed
        store.set_run_status(run_id, "incomplete")
        fail(str(e.with_resume(resume) if hasattr(e, "with_resume") else e).splitlines()[0], code=INCOMPLETE_EXIT_CODE)
    except USER_ERRORS as e:
        store.set_run_status(run_id, "failed")
        fail(f"{str(e).splitlines()[0] if str(e) else type(e).__name__} (fix it, then `{resume}`)")
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise
    if outcome.status == "paused":
        store.set_run_status(run_id, "paused")
        console.print(f"paused before {', '.join(outcome.waiting_for)}: inspect with `gapforge review {run_id}`, decide with "
                      f"`gapforge review {run_id} --approve` (or --keep a,b), then `gapforge run --resume {run_id}`", highlight=False, soft_wrap=True)
    else:
        store.set_run_status(run_id, "done")
        values = outcome.values
        _table(capability_table(values))
        if values.get("evaluation"):
            _table(evaluation_table(values))
            for line in _headline(store, run_id):
                console.print(line, highlight=False, soft_wrap=True)
        if values.get("report"):
            console.print(f"report: {values['report']}", highlight=False, soft_wrap=True)
    if last_line:
        console.print(f"run {run_id}", highlight=False, soft_wrap=True)
    return 0


def _headline(store: Any, run_id: str) -> list[str]:
    """The focus family's base -> TRACE result with its paired 95% interval (evaluation.summary), from the store."""
    from evaluation.summary import headline

    metrics = {e.name.removeprefix("eval:"): e.metrics for e in store.evaluations(run_id) if e.name.startswith("eval:")}
    return headline(metrics) if metrics else []


@app.command("run")
@handle_errors
def run_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    review: Annotated[bool, typer.Option("--review", help="pause after select for `gapforge review RUN`")] = False,
    resume: Annotated[str | None, typer.Option("--resume", help="continue this run from its last checkpoint")] = None,
    stages: StagesOpt = None,
) -> None:
    """Run the whole TRACE loop as one checkpointed graph (or --resume one)."""
    cfg = get_config(config, set_)
    store = _store(cfg)
    if resume:
        record, _status = get_run_record(store, resume)
        options = options_from_record(record)
        run_cfg = config_from_record(record, executor_overrides(set_), store_url=cfg.store.url)  # e.g. another machine's executor.address
        connect_executor(run_cfg)  # executor.kind ray: the head answers, or one line naming executor.address (exit 2)
        console.print(f"run {resume}", highlight=False, soft_wrap=True)
        if record.get("command") == "demo":
            from gapforge.demo import REAL_NOTE, SCRIPTED_NOTE

            console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
            code = drive_run(run_cfg, store, resume, options, fresh=False, last_line=False)
            console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
            console.print(REAL_NOTE, highlight=False, soft_wrap=True)
            console.print(f"run {resume}", highlight=False, soft_wrap=True)
            raise typer.Exit(code)
        raise typer.Exit(drive_run(run_cfg, store, resume, options, fresh=False))
    options = RunOptions(review=review, **({"stages": stages} if stages else {}))
    connect_executor(cfg)  # before the run exists: an unreachable Ray head is one line naming executor.address (exit 2)
    run_id = store.create_run("trace", run_record("run", cfg, options))
    console.print(f"run {run_id}", highlight=False, soft_wrap=True)
    raise typer.Exit(drive_run(cfg, store, run_id, options, fresh=True))


def _inspect(config: str | None, set_: list[str] | None, fn: Any) -> Any:
    cfg = get_config(config, set_)
    store = _store(cfg)

    async def go() -> Any:
        async with open_run(cfg, store) as opened:
            return await fn(opened)

    return asyncio.run(go())


async def _snapshot(opened: Any, run_id: str) -> Any:
    from graph.runner import thread_config

    get_run_record(opened.store, run_id)
    snap = await opened.graph.aget_state(thread_config(run_id))
    if not snap.values:
        raise UsageError(f"run {run_id!r} has no checkpoint yet: start it with `gapforge run --resume {run_id}`")
    return snap


@app.command("runs")
@handle_errors
def runs_cmd(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """List graph runs: id, started, status, stage, capabilities retained/trained, pass rate base -> TRACE."""
    from graph.runner import thread_config

    async def go(opened: Any) -> list[tuple[Any, dict[str, Any]]]:
        rows = [r for r in opened.store.list_runs() if r.kind in ("trace", "demo")]
        return [(r, dict((await opened.graph.aget_state(thread_config(r.id))).values or {})) for r in rows]

    _table(runs_table(_inspect(config, set_, go)))


@app.command("state")
@handle_errors
def state_cmd(run: str, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """A run's current stage, per-capability table and cost per stage."""

    async def go(opened: Any) -> Any:
        return await _snapshot(opened, run)

    snap = _inspect(config, set_, go)
    values = dict(snap.values)
    console.print(f"run {run}  stage: {values.get('stage', '-')}  next: {', '.join(snap.next) or 'end'}", highlight=False, soft_wrap=True)
    notes = values.get("notes") or {}
    for stage, state in (values.get("stages") or {}).items():
        line = f"  {stage}: {state}" + (f" — {notes[stage]}" if stage in notes else "")
        console.print(line, highlight=False, soft_wrap=True)
    if values.get("rollouts"):
        r = values["rollouts"]
        console.print(f"rollouts: {r.get('episodes')} episodes, {r.get('successes')} successes", highlight=False, soft_wrap=True)
    _table(capability_table(values))
    if values.get("evaluation"):
        _table(evaluation_table(values))
    _table(cost_table(values))
    if values.get("report"):
        console.print(f"report: {values['report']}", highlight=False, soft_wrap=True)


@app.command("history")
@handle_errors
def history_cmd(run: str, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """The run's checkpoint timeline: step, node, time, what changed."""
    from graph.inspect import history

    async def go(opened: Any) -> Any:
        await _snapshot(opened, run)
        return await history(opened.graph, run)

    _table(history_table(run, _inspect(config, set_, go)))


@app.command("fork")
@handle_errors
def fork_cmd(
    run: str,
    checkpoint: Annotated[str, typer.Option("--checkpoint", help="a checkpoint id from `gapforge history RUN`")],
    set_: SetOpt = None,
    config: ConfigOpt = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="id of the new run (default: generated)")] = None,
) -> None:
    """Continue RUN from a past checkpoint, with changed settings, as a new run that reuses its stored work."""
    from gapforge.fork_rows import copy_shared_work
    from graph.inspect import ForkError, fork, fork_point, shared_work

    cfg = get_config(config, None)
    store = _store(cfg)
    record, _ = get_run_record(store, run)
    parent_options = options_from_record(record)
    new_cfg = config_from_record(record, set_, store_url=cfg.store.url)
    options = RunOptions(review=parent_options.review, stages=parent_options.stages,
                         forked_from={"run": run, "checkpoint": checkpoint})

    async def go(opened: Any) -> tuple[str, dict[str, int]]:
        values = await fork_point(opened.graph, run, checkpoint)
        new_id = store.create_run("trace", run_record("fork", new_cfg, options), run_id)
        copied = copy_shared_work(store, run, new_id, shared_work(values))
        await fork(opened.graph, run, checkpoint, new_id)
        return new_id, copied

    try:
        new_id, copied = asyncio.run(_with_run(cfg, store, go))
    except ForkError as e:
        raise UsageError(str(e)) from None
    console.print(f"run {new_id}", highlight=False, soft_wrap=True)
    reused = ", ".join(f"{n} {table}" for table, n in copied.items() if n) or "nothing"
    console.print(f"fork of {run} at {checkpoint} with {' '.join(set_ or []) or 'the same settings'}; reused {reused}",
                  highlight=False, soft_wrap=True)
    raise typer.Exit(drive_run(new_cfg, store, new_id, options, fresh=False))


async def _with_run(cfg: Any, store: Any, fn: Any) -> Any:
    async with open_run(cfg, store) as opened:
        return await fn(opened)


@app.command("review")
@handle_errors
def review_cmd(
    run: str,
    approve: Annotated[bool, typer.Option("--approve", help="keep the retained list as it is")] = False,
    keep: Annotated[str | None, typer.Option("--keep", help="comma-separated capabilities to train (edits the list)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Show the capability list a --review run paused on, or record the decision (then `run --resume`)."""
    from graph.runner import thread_config

    if approve and keep:
        raise UsageError("give --approve or --keep, not both")

    async def go(opened: Any) -> Any:
        snap = await _snapshot(opened, run)
        if tuple(snap.next) != ("review",) or not snap.interrupts:
            raise UsageError(f"run {run!r} is not waiting for a review (next: {', '.join(snap.next) or 'end'})")
        values = dict(snap.values)
        retained = list(values.get("retained") or [])
        if not (approve or keep):
            return values, None
        chosen = retained if approve else [c.strip() for c in (keep or "").split(",") if c.strip()]
        known = set(values.get("dictionary") or []) | set(values.get("capabilities") or {})
        unknown = [c for c in chosen if c not in known]
        if unknown:
            raise UsageError(f"unknown capability {', '.join(unknown)}: pick from {', '.join(sorted(known))}")
        decision = {"retained": chosen, "edited": not approve}
        await opened.graph.aupdate_state(thread_config(run), {"review": decision}, as_node="select")
        return values, decision

    values, decision = _inspect(config, set_, go)
    if decision is None:
        _table(capability_table(values))
        console.print(f"retained: {', '.join(values.get('retained') or []) or 'none'}", highlight=False, soft_wrap=True)
        console.print(f"decide: gapforge review {run} --approve | --keep a,b", highlight=False, soft_wrap=True)
        return
    console.print(f"review recorded for {run}: train {', '.join(decision['retained']) or 'nothing'}; "
                  f"continue with `gapforge run --resume {run}`", highlight=False, soft_wrap=True)
