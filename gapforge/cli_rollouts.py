"""`gapforge rollouts collect`: episodes of a policy on a target env, stored under the run's lease
(`rollouts tasks` / `rollouts show`: gapforge/cli_rollouts_show.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from gapforge.agents.rollouts import CollectResult, EnvFailureShare, rollout_summary
from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    console,
    err_console,
    get_config,
    handle_errors,
)
from gapforge.cli_rollouts_show import register_show, render_summary
from gapforge.executor import connect
from gapforge.rollouts_run import check_identity, parse_tasks, resume_command
from gapforge.run_lease import run_lease
from gapforge.stages.rollouts import (
    check_run_target,
    collect_plan,
    env_errors_warning,
    env_turn_limit,
    infra_stop,
    play_collection,
    target_record,
    timeouts_warning,
)
from gapforge.store.errors import DiskFull
from gapforge.store.fencing import LeaseLost
from gapforge.wiring import (
    apply_policy_spec,
    build_deps,
    make_target_env_factory,
)

app = typer.Typer(no_args_is_help=True, help="Collect and inspect rollouts of a policy on a target env.")
register_show(app)  # `rollouts tasks` and `rollouts show` (gapforge/cli_rollouts_show.py)


@app.command("collect")
@handle_errors
def collect_cmd(
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="shop | tau2:<domain> | toolsandbox[:category] | mcp:FILE.yaml | trl:FILE.py:Class?rows=FILE | composite:SPEC+SPEC | "
            "package.module:Class | path/to/file.py:Class (docs/your-agent.md)",
        ),
    ] = None,
    policy: Annotated[
        str | None, typer.Option("--policy", help="endpoint URL, local model dir, or scripted:ANSWERS.yaml")
    ] = None,
    samples: Annotated[int | None, typer.Option("--samples", min=1, help="episodes per task (K)")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="episodes in flight")] = None,
    tasks: Annotated[str | None, typer.Option("--tasks", help="comma-separated task ids (default: all)")] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="continue this run id (only missing and env_error episodes run; "
            "env, policy and tasks default to the run's)",
        ),
    ] = None,
    allow_env_change: Annotated[
        bool, typer.Option("--allow-env-change", help="with --run: go on although the env's tools or tasks changed")
    ] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run the policy on the env's tasks and store every episode (idempotent per run/env/task/sample).

    Exit 0: every planned episode is stored, except ones past the episode time limit in the env's own code (not
    stored: a resume plays them again); `env_error` episodes (the env's code raised) below the failure share are stored
    with a warning. Exit 3: some ended in infrastructure failures (endpoint down, sandbox lost, a timeout waiting on the
    policy, the sandbox or a worker). Exit 4: the env's code failed more than `rollouts.max_env_failure_share` of the
    episodes. What finished is stored; a resume (`--run RUN`) plays the rest, `env_error` episodes included.
    The run records the env's spec and fingerprint; `--run` refuses an env whose tools or tasks changed since.
    """
    overrides = list(set_ or [])
    if concurrency is not None:
        overrides.append(f"rollouts.concurrency={concurrency}")  # the config's limits apply to the flag too
    if samples is not None:
        overrides.append(f"rollouts.samples={samples}")
    cfg = get_config(config, overrides)
    connect(cfg.executor)  # executor.kind ray: the head answers before any run is created (else exit 2, one line)
    deps = build_deps(cfg)
    store = deps.store
    prior = store.get_run(run) if run else None
    stored = prior.config if prior is not None else {}
    if samples is None and stored.get("samples"):
        samples = int(stored["samples"])  # a resume plans what the run planned
    env_name = env or stored.get("env") or cfg.rollouts.env
    policy_spec = policy if policy is not None else stored.get("policy_spec")
    probe, make_env = make_target_env_factory(cfg, env_name)
    try:
        target = target_record(probe, env_name)
        default_tasks = ",".join(stored["tasks"]) if tasks is None and stored.get("tasks") else None
        wanted = (
            tasks
            if tasks is not None
            else default_tasks or (",".join(cfg.rollouts.tasks) if cfg.rollouts.tasks else None)
        )
        known = probe.task_ids()
        family_of = {t: probe.task_family(t) for t in known}
        env_turns = env_turn_limit(probe)
    finally:
        probe.close()
    if prior is not None:  # before the task ids: a changed task set is named as such
        check_identity(prior, env_name, None)
        for warning in check_run_target(store, prior.id, target, allow_change=allow_env_change, record=False):
            err_console.print(escape(f"warning: {warning}"), highlight=False, soft_wrap=True)
    task_ids = parse_tasks(wanted, known)
    families = {t: family_of[t] for t in task_ids}
    pol_cfg = apply_policy_spec(cfg, policy_spec)
    pol = deps.make_policy(pol_cfg)
    if prior is not None:
        check_identity(prior, env_name, pol.name)
    run_config = {
        "command": "rollouts collect",
        "env": env_name,
        "policy": pol.name,
        "policy_spec": policy_spec,
        "tasks": task_ids,
        "samples": cfg.rollouts.samples if samples is None else samples,
        "config": cfg.dump(),
        "target": target.model_dump(),
    }
    run_id = prior.id if prior is not None else store.create_run("rollouts", run_config)
    console.print(f"run {run_id}", highlight=False)
    plan = collect_plan(
        cfg,
        run_id,
        env_name,
        task_ids,
        samples=samples,
        temperature=pol_cfg.temperature,
        pol_cfg=pol_cfg,
        env_turns=env_turns,
    )
    resume = resume_command(run_id, config)
    with run_lease(cfg, run_id, "rollouts collect"):
        if prior is not None:  # recorded under the lease (checked above, before any work)
            check_run_target(store, run_id, target, allow_change=allow_env_change)
        store.set_run_status(run_id, "running")
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            stored_keys = store.episode_keys(run_id, env_name)  # a resumed run may hold keys outside this plan
            if plan.replay_env_errors:  # played again (agents.rollouts.collect), unless the run's analysis has started
                stored_keys -= {
                    (e.task_id, e.sample)
                    for e in store.episode_summaries(run_id, env_name)
                    if e.termination == "env_error"
                }
            pending = sum(key not in stored_keys for key in plan.keys())
            tid = bar.add_task(f"{env_name} x {pol.name}", total=pending)
            live = CollectResult(
                planned=0, skipped=0, ran=0
            )  # filled as episodes are stored: the counts survive a stop

            def say_progress(
                line: str,
            ) -> None:  # not on a terminal the bar shows nothing until the end: a line now and then
                console.print(f"collect: {line}", highlight=False, soft_wrap=True)

            def advance(ep) -> None:
                if ep.final:  # an infrastructure failure or a timeout is not finished: a resume redoes it
                    bar.advance(tid)

            async def run_and_close() -> CollectResult:
                try:  # the graph's collect_rollouts plays the same way (gapforge/stages/rollouts.py)
                    return await play_collection(
                        cfg,
                        store,
                        plan,
                        pol_cfg=pol_cfg,
                        policy=lambda: pol,
                        make_env=make_env,
                        families=families,
                        result=live,
                        on_episode=advance,
                        heartbeat=None if console.is_terminal else say_progress,
                    )
                finally:
                    await deps.aclose_policies()  # this command made the policy: it closes it, in the loop that used it

            try:
                result = asyncio.run(run_and_close())
            except KeyboardInterrupt:
                store.set_run_status(run_id, "interrupted")
                console.print(f"interrupted: resume with `{resume}`\nrun {run_id}", highlight=False)
                raise typer.Exit(130) from None
            except LeaseLost:  # another process holds the run now: it decides the run's status
                console.print(
                    f"{live.ran} episodes ran (stored by this process before it lost the run), {live.skipped} already stored, "
                    f"{live.planned} planned",
                    highlight=False,
                )
                raise
            except DiskFull as e:  # the batch being written was rolled back whole: free space, then resume
                with contextlib.suppress(
                    DiskFull
                ):  # when it cannot be written, the dead lease reads `interrupted` later
                    store.set_run_status(run_id, "incomplete")
                raise e.with_resume(resume) from None
            except EnvFailureShare as e:  # the env's code failed too often: stopped where it stood, resumable
                store.set_run_status(run_id, "incomplete")
                raise e.with_resume(resume) from None
            except BaseException:
                store.set_run_status(run_id, "failed")
                err_console.print(
                    f"run {run_id} stopped; what finished is stored: resume with `{resume}`", highlight=False
                )
                raise
        store.set_run_status(run_id, "done" if result.complete else "incomplete")
    elsewhere = f", {result.stored_elsewhere} stored meanwhile by another process" if result.stored_elsewhere else ""
    replayed = f" ({result.replayed} env_error episodes of an earlier call played again)" if result.replayed else ""
    console.print(
        f"{result.ran} episodes ran{replayed}, {result.skipped} already stored{elsewhere}, {result.planned} planned",
        highlight=False,
        soft_wrap=True,
    )
    render_summary(rollout_summary(store, run_id, env_name))
    console.print(f"run {run_id}", highlight=False)
    deps.close()
    if warning := timeouts_warning(plan, result):
        err_console.print(escape(f"warning: {warning}: `{resume}` plays them again"), highlight=False, soft_wrap=True)
    if warning := env_errors_warning(result, resume):
        err_console.print(escape(f"warning: {warning}"), highlight=False, soft_wrap=True)
    if stop := infra_stop(result, resume=resume):
        raise stop
