"""`gapforge run / runs / state / history / fork`: the self-improvement graph (`review`: gapforge/cli_review.py).

Rendering only: the run lifecycle lives in gapforge/run_session.py, the graph
and its inspection in graph/.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gapforge.cli_common import ConfigOpt, SetOpt, UsageError, get_config, handle_errors
from gapforge.cli_drive import drive, print_table, say, store_of
from gapforge.envs.target_check import describe
from gapforge.executor import connect
from gapforge.executor_wiring import executor_overrides
from gapforge.run_progress import read_progress
from gapforge.run_session import RunOptions, create_run, get_run_record, inspect_graph, resume_plan
from gapforge.run_view import (
    capability_table,
    cost_tables,
    evaluation_table,
    history_table,
    runs_table,
)
from gapforge.store.errors import NoStore

if TYPE_CHECKING:
    from gapforge.store import Store

app = typer.Typer(help="The self-improvement graph: run, inspect, time-travel.")


def register(root: typer.Typer) -> None:
    """Attach run, runs, state, history and fork as top-level commands (review: gapforge/cli_review.py)."""
    root.add_typer(app)


EstimateOpt = Annotated[
    bool,
    typer.Option(
        "--estimate",
        help="print what the run would cost (calls and tokens per stage, rollouts, policy hours, $ at `pricing`) from "
        "a probe of a few target episodes, and start nothing",
    ),
]
ThroughputOpt = Annotated[
    float | None,
    typer.Option(
        "--throughput", min=1.0, help="with --estimate: the policy's tokens/s (default: the probe's rate here)"
    ),
]


def print_estimate(cfg: Any, throughput: float | None) -> None:
    """`--estimate`: the probe, the table, what it assumes (gapforge/estimate.py); nothing is stored."""
    from gapforge.estimate import estimate

    say(f"estimate: playing a few of {cfg.rollouts.env}'s tasks with the configured policy (nothing is stored) ...")
    table, lines = estimate(cfg, throughput=throughput)
    print_table(table)
    for line in lines:
        say(line)


@app.command("run")
@handle_errors
def run_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    review: Annotated[bool, typer.Option("--review", help="pause after select for `gapforge review RUN`")] = False,
    resume: Annotated[str | None, typer.Option("--resume", help="continue this run from its last checkpoint")] = None,
    allow_env_change: Annotated[
        bool, typer.Option("--allow-env-change", help="with --resume: go on although the env's tools or tasks changed")
    ] = False,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="the target (rollouts.env): shop | tau2:<domain> | toolsandbox[:category] | "
            "mcp:FILE.yaml | trl:FILE.py:Class?rows=FILE | composite:SPEC+SPEC | package.module:Class | path/to/file.py:Class (docs/your-agent.md)",
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy", help="the base policy: a local model dir, or an endpoint URL (its weights in policy.local_path)"
        ),
    ] = None,
    estimate: EstimateOpt = False,
    throughput: ThroughputOpt = None,
) -> None:
    """Run the whole TRACE loop as one checkpointed graph (or --resume one).

    Before anything is stored, every check that needs no episode runs (gapforge/preflight.py): the config, the target
    env, the policy's weights and endpoint, and the LLM roles (a key and a server, or recordings for this env)."""
    if resume and (env or policy or estimate):
        raise UsageError(
            "--env, --policy and --estimate are for a new run; a resumed run keeps the env and policy it was started with"
        )
    overrides = list(set_ or [])
    if env is not None:
        overrides.append(
            f"rollouts.env={json.dumps(env)}"
        )  # a JSON string is YAML: the spec stays the exact string given
    cfg = get_config(config, overrides)
    if policy is not None:
        from gapforge.wiring import apply_policy_spec

        cfg.policy = apply_policy_spec(cfg, policy)
    if resume:
        store = store_of(cfg, must_exist=True)  # a wrong directory or store.url: refused, no empty store made
        from gapforge.stages.rollouts import resume_target_check

        plan = resume_plan(
            store, resume, cfg.store.url, executor_overrides(set_)
        )  # e.g. another machine's executor.address
        for warning in resume_target_check(
            plan.cfg, store, resume, allow_change=allow_env_change
        ):  # a changed env: refused here
            say(f"warning: {warning}")
        connect(plan.cfg.executor)  # executor.kind ray: the head answers, or one line naming executor.address (exit 2)
        say(f"run {resume}")
        if plan.command != "demo":
            raise typer.Exit(drive(plan.cfg, store, resume, plan.options, fresh=False))
        from gapforge.demo import REAL_NOTE, SCRIPTED_NOTE

        say(SCRIPTED_NOTE)
        code = drive(plan.cfg, store, resume, plan.options, fresh=False, last_line=False)
        for line in (SCRIPTED_NOTE, REAL_NOTE, f"run {resume}"):
            say(line)
        raise typer.Exit(code)
    if estimate:
        print_estimate(cfg, throughput)
        return
    options = RunOptions(review=review)
    connect(cfg.executor)  # before the run exists: an unreachable Ray head is one line naming executor.address (exit 2)
    if cfg.stages == "real":
        from gapforge.preflight import check_before_run

        check_before_run(cfg)  # nothing is created before these pass: no store, no run
    store = store_of(cfg)
    run_id = create_run(store, "trace", "run", cfg, options)
    say(f"run {run_id}")
    raise typer.Exit(drive(cfg, store, run_id, options, fresh=True))


def inspect_graph_of(config: str | None, set_: list[str] | None, fn: Any) -> Any:
    """`await fn(store, graph)` for a read-only command."""
    cfg = get_config(config, set_)
    store = store_of(cfg, must_exist=True)  # a mistyped store.url or another directory: said, no empty store made
    return cfg, store, inspect_graph(cfg, lambda graph: fn(store, graph))


async def snapshot_of(store: Store, graph: Any, run_id: str) -> Any:
    from gapforge.graph.runner import thread_config

    get_run_record(store, run_id)
    snap = await graph.aget_state(thread_config(run_id))
    if not snap.values:
        raise UsageError(f"run {run_id!r} has no checkpoint yet: start it with `gapforge run --resume {run_id}`")
    return snap


@app.command("runs")
@handle_errors
def runs_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    kind: Annotated[list[str] | None, typer.Option(help="trace, demo or rollouts")] = None,
) -> None:
    """List runs (graph and `rollouts collect` runs, newest first): id, kind, started, status, env, episodes; a graph run's stage, capabilities, pass rates."""
    from gapforge.cli_common import console
    from gapforge.run_inspect import continue_command, listed_kinds, print_whole, run_rows

    kinds = listed_kinds(kind)
    try:
        rows = inspect_graph_of(config, set_, lambda store, graph: run_rows(store, graph, kinds))[2]
    except NoStore as e:  # no runs here: said where it looked, nothing created
        say(f"no runs: {e}")
        return
    print_whole(console, runs_table(rows))  # piped: every id and value whole, one line per run
    for run, _values in rows:
        if run.status in ("interrupted", "incomplete", "failed"):
            say(f"{run.id} is {run.status}: continue with `{continue_command(run, config)}`")


@app.command("state")
@handle_errors
def state_cmd(run: str, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """A run's status, current stage (with its progress when one is in flight, or the one that failed), per-capability table and cost per stage."""
    from gapforge.run_inspect import stage_lines

    async def go(store: Store, graph: Any) -> Any:
        return await snapshot_of(store, graph, run)

    cfg, store, snap = inspect_graph_of(config, set_, go)
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
    stopped = status in ("failed", "incomplete")  # what stopped it is in the progress file, even before a checkpoint
    for line in stage_lines(status, tuple(snap.next), values, read_progress(cfg, run) if snap.next or stopped else {}):
        say(line)  # the parts of the stage in flight (or stopped in flight), or the stage a failed run's error stopped
    if values.get("rollouts"):
        r = values["rollouts"]
        say(f"rollouts: {r.get('episodes')} episodes, {r.get('successes')} successes")
    print_table(capability_table(values))
    if values.get("evaluation"):
        print_table(evaluation_table(values))
    per_stage, per_capability, spend = cost_tables(values, cfg)
    for table in (per_stage, per_capability) if per_capability is not None else (per_stage,):
        print_table(table)
    for line in spend:
        say(line)
    if values.get("report"):
        say(f"report: {values['report']}")


@app.command("history")
@handle_errors
def history_cmd(run: str, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """The run's checkpoint timeline: step, node, time, what changed."""
    from gapforge.graph.inspect import history

    async def go(store: Store, graph: Any) -> Any:
        await snapshot_of(store, graph, run)
        return await history(graph, run)

    print_table(history_table(run, inspect_graph_of(config, set_, go)[2]))


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
    store = store_of(cfg, must_exist=True)
    new_id, new_cfg, options, copied = fork_run(cfg, store, run, checkpoint, set_, run_id)
    say(f"run {new_id}")
    reused = ", ".join(f"{n} {table}" for table, n in copied.items() if n) or "nothing"
    say(f"fork of {run} at {checkpoint} with {' '.join(set_ or []) or 'the same settings'}; reused {reused}")
    raise typer.Exit(drive(new_cfg, store, new_id, options, fresh=False))
