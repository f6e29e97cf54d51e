"""`gapforge run / runs / state / history / fork / review`: the self-improvement graph.

Rendering only: the run lifecycle lives in gapforge/run_session.py, the graph
and its inspection in graph/.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gapforge.cli_common import ConfigOpt, SetOpt, UsageError, get_config, handle_errors
from gapforge.cli_drive import drive, print_table, say, store_of
from gapforge.envs.target_check import describe
from gapforge.executor_wiring import connect_executor, executor_overrides
from gapforge.run_progress import read_progress
from gapforge.run_session import RunOptions, create_run, get_run_record, inspect_graph, resume_plan
from gapforge.run_view import (
    capability_table,
    cost_table,
    evaluation_table,
    history_table,
    runs_table,
)

app = typer.Typer(help="The self-improvement graph: run, inspect, time-travel.")


def register(root: typer.Typer) -> None:
    """Attach run, runs, state, history, fork and review as top-level commands."""
    root.add_typer(app)


@app.command("run")
@handle_errors
def run_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    review: Annotated[bool, typer.Option("--review", help="pause after select for `gapforge review RUN`")] = False,
    resume: Annotated[str | None, typer.Option("--resume", help="continue this run from its last checkpoint")] = None,
    allow_env_change: Annotated[bool, typer.Option("--allow-env-change", help="with --resume: go on although the env's tools or tasks changed")] = False,
) -> None:
    """Run the whole TRACE loop as one checkpointed graph (or --resume one)."""
    cfg = get_config(config, set_)
    store = store_of(cfg)
    if resume:
        from gapforge.stages.rollouts import resume_target_check

        plan = resume_plan(store, resume, cfg.store.url, executor_overrides(set_))  # e.g. another machine's executor.address
        for warning in resume_target_check(plan.cfg, store, resume, allow_change=allow_env_change):  # a changed env: refused here
            say(f"warning: {warning}")
        connect_executor(plan.cfg)  # executor.kind ray: the head answers, or one line naming executor.address (exit 2)
        say(f"run {resume}")
        if plan.command != "demo":
            raise typer.Exit(drive(plan.cfg, store, resume, plan.options, fresh=False))
        from gapforge.demo import REAL_NOTE, SCRIPTED_NOTE

        say(SCRIPTED_NOTE)
        code = drive(plan.cfg, store, resume, plan.options, fresh=False, last_line=False)
        for line in (SCRIPTED_NOTE, REAL_NOTE, f"run {resume}"):
            say(line)
        raise typer.Exit(code)
    options = RunOptions(review=review)
    connect_executor(cfg)  # before the run exists: an unreachable Ray head is one line naming executor.address (exit 2)
    run_id = create_run(store, "trace", "run", cfg, options)
    say(f"run {run_id}")
    raise typer.Exit(drive(cfg, store, run_id, options, fresh=True))


def _inspect(config: str | None, set_: list[str] | None, fn: Any) -> Any:
    """`await fn(store, graph)` for a read-only command."""
    cfg = get_config(config, set_)
    store = store_of(cfg)
    return cfg, store, inspect_graph(cfg, lambda graph: fn(store, graph))


async def _snapshot(store: Any, graph: Any, run_id: str) -> Any:
    from gapforge.graph.runner import thread_config

    get_run_record(store, run_id)
    snap = await graph.aget_state(thread_config(run_id))
    if not snap.values:
        raise UsageError(f"run {run_id!r} has no checkpoint yet: start it with `gapforge run --resume {run_id}`")
    return snap


@app.command("runs")
@handle_errors
def runs_cmd(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """List graph runs: id, started, status, stage, capabilities retained/trained, pass rate base -> TRACE."""
    from gapforge.graph.runner import thread_config

    async def go(store: Any, graph: Any) -> list[tuple[Any, dict[str, Any]]]:
        rows = [r for r in store.list_runs() if r.kind in ("trace", "demo")]
        return [(r, dict((await graph.aget_state(thread_config(r.id))).values or {})) for r in rows]

    rows = _inspect(config, set_, go)[2]
    print_table(runs_table(rows))
    for run, _values in rows:
        if run.status in ("interrupted", "incomplete", "failed"):
            say(f"{run.id} is {run.status}: continue with `gapforge run --resume {run.id}`")


@app.command("state")
@handle_errors
def state_cmd(run: str, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """A run's status, current stage (with its progress when one is in flight), per-capability table and cost per stage."""

    async def go(store: Any, graph: Any) -> Any:
        return await _snapshot(store, graph, run)

    cfg, store, snap = _inspect(config, set_, go)
    values, status = dict(snap.values), store.get_run(run).status
    say(f"run {run}  status: {status}  stage: {values.get('stage', '-')}  next: {', '.join(snap.next) or 'end'}")
    target = store.run_target(run)  # recorded by its first collection
    if target:
        say(f"target: {describe(target)}")
    if status in ("interrupted", "incomplete", "failed"):
        say(f"  continue with `gapforge run --resume {run}`")
    notes = values.get("notes") or {}
    for stage, state in (values.get("stages") or {}).items():
        say(f"  {stage}: {state}" + (f" — {notes[stage]}" if stage in notes else ""))
    if snap.next:  # a stage in flight (or stopped in flight): the last progress line each of its parts reported
        for where, line in read_progress(cfg, run).items():
            say(f"  in progress: {where}: {line}")
    if values.get("rollouts"):
        r = values["rollouts"]
        say(f"rollouts: {r.get('episodes')} episodes, {r.get('successes')} successes")
    print_table(capability_table(values))
    if values.get("evaluation"):
        print_table(evaluation_table(values))
    print_table(cost_table(values))
    if values.get("report"):
        say(f"report: {values['report']}")


@app.command("history")
@handle_errors
def history_cmd(run: str, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """The run's checkpoint timeline: step, node, time, what changed."""
    from gapforge.graph.inspect import history

    async def go(store: Any, graph: Any) -> Any:
        await _snapshot(store, graph, run)
        return await history(graph, run)

    print_table(history_table(run, _inspect(config, set_, go)[2]))


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
    from gapforge.run_session import fork_run

    cfg = get_config(config, None)
    store = store_of(cfg)
    new_id, new_cfg, options, copied = fork_run(cfg, store, run, checkpoint, set_, run_id)
    say(f"run {new_id}")
    reused = ", ".join(f"{n} {table}" for table, n in copied.items() if n) or "nothing"
    say(f"fork of {run} at {checkpoint} with {' '.join(set_ or []) or 'the same settings'}; reused {reused}")
    raise typer.Exit(drive(new_cfg, store, new_id, options, fresh=False))


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
    from gapforge.graph.runner import thread_config

    if approve and keep:
        raise UsageError("give --approve or --keep, not both")

    async def go(store: Any, graph: Any) -> Any:
        snap = await _snapshot(store, graph, run)
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
        await graph.aupdate_state(thread_config(run), {"review": decision}, as_node="select")
        return values, decision

    values, decision = _inspect(config, set_, go)[2]
    if decision is None:
        print_table(capability_table(values))
        say(f"retained: {', '.join(values.get('retained') or []) or 'none'}")
        say(f"decide: gapforge review {run} --approve | --keep a,b")
        return
    say(f"review recorded for {run}: train {', '.join(decision['retained']) or 'nothing'}; continue with `gapforge run --resume {run}`")
