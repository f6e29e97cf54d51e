"""`gapforge rollouts ...`: collect episodes of a policy on a target env, list them, show one."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agents.errors import IncompleteStage
from store.fencing import LeaseLost
from gapforge.cli_common import ConfigOpt, SetOpt, UsageError, console, err_console, get_config, handle_errors
from agents.rollouts import CollectResult, RolloutSummary, rollout_summary
from gapforge.run_lease import run_lease
from gapforge.wiring import apply_policy_spec, build_deps, connect_executor, episode_player, make_target_env_factory, open_store

app = typer.Typer(no_args_is_help=True, help="Collect and inspect rollouts of a policy on a target env.")


def _parse_tasks(raw: str | None, known: list[str]) -> list[str]:
    if raw is None:
        return known
    wanted = list(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))  # once each, in order
    if not wanted:
        raise UsageError(f"--tasks {raw!r} names no task: give comma-separated ids (list them with `gapforge rollouts tasks ENV`) or omit it for all")
    unknown = [t for t in wanted if t not in set(known)]
    if unknown:
        raise UsageError(f"unknown task id(s) {', '.join(unknown)}: list them with `gapforge rollouts tasks ENV`")
    return wanted


def _resume_command(run_id: str, config: str | None) -> str:
    return f"gapforge rollouts collect --run {run_id}" + (f" --config {config}" if config else "")


def _check_identity(run_row, env_name: str, policy_name: str) -> None:
    """A run collects one env with one policy: refuse work that does not belong to it."""
    stored = run_row.config or {}
    if run_row.kind != "rollouts":
        raise UsageError(f"run {run_row.id} is a {run_row.kind} run, not a rollouts run: start a new one (omit --run)")
    for what, mine in (("env", env_name), ("policy", policy_name)):
        theirs = stored.get(what)
        if theirs is not None and theirs != mine:
            raise UsageError(
                f"run {run_row.id} collects env {stored.get('env')!r} with policy {stored.get('policy')!r}, not {what} {mine!r}: "
                "resume it with its own env and policy, or start a new run (omit --run)"
            )


@app.command("collect")
@handle_errors
def collect_cmd(
    env: Annotated[str | None, typer.Option("--env", help="shop | tau2:retail | tau2:airline | tau2:telecom | toolsandbox[:category]")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="endpoint URL, local model dir, or scripted:ANSWERS.yaml")] = None,
    samples: Annotated[int | None, typer.Option("--samples", min=1, help="episodes per task (K)")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="episodes in flight")] = None,
    tasks: Annotated[str | None, typer.Option("--tasks", help="comma-separated task ids (default: all)")] = None,
    run: Annotated[str | None, typer.Option("--run", help="continue this run id (only missing episodes run; env, policy and tasks default to the run's)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run the policy on the env's tasks and store every episode (idempotent per run/env/task/sample).

    Exit 0: every planned episode is stored. Exit 3: some ended in infrastructure failures
    (endpoint down, sandbox lost); they are not stored and a resume (`--run RUN`) redoes them.
    """
    from agents.rollouts import CollectPlan, collect

    overrides = list(set_ or [])
    if concurrency is not None:
        overrides.append(f"rollouts.concurrency={concurrency}")  # the config's limits apply to the flag too
    if samples is not None:
        overrides.append(f"rollouts.samples={samples}")
    cfg = get_config(config, overrides)
    connect_executor(cfg)  # executor.kind ray: the head answers before any run is created (else exit 2, one line)
    deps = build_deps(cfg)
    store = deps.store
    prior = store.get_run(run) if run else None
    stored = prior.config if prior is not None else {}
    if samples is None and stored.get("samples"):
        samples = int(stored["samples"])  # a resume plans what the run planned
    env_name = env or stored.get("env") or cfg.rollouts.env
    policy_spec = policy if policy is not None else stored.get("policy_spec")
    probe, make_env = make_target_env_factory(cfg, env_name)
    default_tasks = ",".join(stored["tasks"]) if tasks is None and stored.get("tasks") else None
    task_ids = _parse_tasks(tasks if tasks is not None else default_tasks or (",".join(cfg.rollouts.tasks) if cfg.rollouts.tasks else None), probe.task_ids())
    families = {t: probe.task_family(t) for t in task_ids}
    probe.close()
    pol_cfg = apply_policy_spec(cfg, policy_spec)
    pol = deps.make_policy(pol_cfg)
    if prior is not None:
        _check_identity(prior, env_name, pol.name)
    run_config = {
        "command": "rollouts collect", "env": env_name, "policy": pol.name, "policy_spec": policy_spec,
        "tasks": task_ids, "samples": cfg.rollouts.samples if samples is None else samples, "config": cfg.dump(),
    }  # fmt: skip
    run_id = prior.id if prior is not None else store.create_run("rollouts", run_config)
    console.print(f"run {run_id}", highlight=False)
    plan = CollectPlan(
        run_id=run_id,
        env=env_name,
        tasks=task_ids,
        samples=cfg.rollouts.samples if samples is None else samples,
        concurrency=cfg.rollouts.concurrency,
        max_turns=cfg.rollouts.max_turns,
        temperature=pol_cfg.temperature,
    )
    resume = _resume_command(run_id, config)
    with run_lease(cfg, run_id, "rollouts collect"):
        store.set_run_status(run_id, "running")
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
            stored_keys = store.episode_keys(run_id, env_name)  # a resumed run may hold keys outside this plan
            pending = sum(key not in stored_keys for key in plan.keys())
            tid = bar.add_task(f"{env_name} x {pol.name}", total=pending)
            live = CollectResult(planned=0, skipped=0, ran=0)  # filled as episodes are stored: the counts survive a stop

            def advance(ep) -> None:
                if not ep.infrastructure_failure:  # not finished: a resume redoes it
                    bar.advance(tid)

            async def run_and_close() -> CollectResult:
                try:
                    async with episode_player(cfg, pol_cfg, make_env) as player:  # None: played in this process
                        return await collect(plan, make_env=make_env, policy=pol, sink=store, families=families, on_episode=advance,
                                             result=live, player=player)
                finally:
                    await deps.aclose_policies()  # this command made the policy: it closes it, in the loop that used it

            try:
                result = asyncio.run(run_and_close())
            except KeyboardInterrupt:
                store.set_run_status(run_id, "interrupted")
                console.print(f"interrupted: resume with `{resume}`\nrun {run_id}", highlight=False)
                raise typer.Exit(130) from None
            except LeaseLost:  # another process holds the run now: it decides the run's status
                console.print(f"{live.ran} episodes ran (stored by this process before it lost the run), {live.skipped} already stored, "
                              f"{live.planned} planned", highlight=False)
                raise
            except BaseException:
                store.set_run_status(run_id, "failed")
                err_console.print(f"run {run_id} stopped; what finished is stored: resume with `{resume}`", highlight=False)
                raise
        store.set_run_status(run_id, "done" if result.complete else "incomplete")
    elsewhere = f", {result.stored_elsewhere} stored meanwhile by another process" if result.stored_elsewhere else ""
    console.print(f"{result.ran} episodes ran, {result.skipped} already stored{elsewhere}, {result.planned} planned")
    render_summary(rollout_summary(store, run_id, env_name))
    console.print(f"run {run_id}", highlight=False)
    deps.close()
    if not result.complete:
        counts = ", ".join(f"{k}={v}" for k, v in result.infra_counts().most_common())
        last = result.infra_failures[-1].error.splitlines()[0] if result.infra_failures[-1].error else "no detail"
        raise IncompleteStage(
            f"{len(result.infra_failures)} of {result.planned} episodes ended in infrastructure failures ({counts}; last: {last}) "
            f"and were not stored: resume with `{resume}`"
        )


def render_summary(summary: RolloutSummary) -> None:
    """Print a `agents.rollouts.RolloutSummary` as a table and a terminations line."""
    table = Table(title=f"run {summary.run_id}: {summary.episodes} episodes")
    for col in ("family", "episodes", "pass rate", "mean reward", "mean turns"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for f in summary.families:
        table.add_row(f.family, str(f.episodes), f"{f.pass_rate:.1%}", f"{f.mean_reward:.3f}", f"{f.mean_turns:.1f}")
    console.print(table)
    console.print("terminations: " + ", ".join(f"{k}={v}" for k, v in summary.terminations.most_common()), highlight=False)


@app.command("tasks")
@handle_errors
def tasks_cmd(env: Annotated[str, typer.Argument(help="shop | tau2:retail | ...")], config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """List an env's task ids and families."""
    cfg = get_config(config, set_)
    probe, _ = make_target_env_factory(cfg, env)
    for t in probe.task_ids():
        console.print(f"{t}\t{probe.task_family(t)}", highlight=False)
    probe.close()


@app.command("show")
@handle_errors
def show_cmd(
    run: Annotated[str, typer.Argument(help="run id")],
    episode: Annotated[int | None, typer.Option("--episode", help="print this episode's trajectory")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """List a run's episodes, or print one trajectory readably."""
    cfg = get_config(config, set_)
    store = open_store(cfg)
    store.get_run(run)
    if episode is None:
        table = Table(title=f"run {run}")
        for col in ("id", "env", "task", "sample", "family", "reward", "success", "turns", "termination"):
            table.add_column(col, no_wrap=col in ("env", "task"))
        for r in store.episode_summaries(run):
            table.add_row(str(r.id), r.env, r.task_id, str(r.sample), r.task_family or "", f"{r.reward:.2f}", "yes" if r.success else "no", str(r.turns), r.termination)
        console.print(table)
        render_summary(rollout_summary(store, run, None))
        return
    ep = store.get_episode(episode)
    if ep.run_id != run:
        raise UsageError(f"episode {episode} belongs to run {ep.run_id}, not {run}")
    console.print(f"[bold]episode {ep.id}[/] {ep.env} task={ep.task_id} sample={ep.sample} policy={ep.policy}")
    console.print(f"reward={ep.reward:.3f} success={ep.success} turns={ep.turns} termination={ep.termination} components={ep.components}")
    started = ep.started_at.isoformat(timespec="seconds") if ep.started_at else "?"
    console.print(f"started={started} user_prompt={ep.user_prompt or '-'}", highlight=False)
    if ep.score_info:
        console.print(f"score info: {json.dumps(ep.score_info, default=str)[:2000]}", highlight=False, markup=False)
    for entry in ep.step_info:
        console.print(f"step info (turn {entry.get('turn')}): {json.dumps(entry.get('info'), default=str)[:500]}", highlight=False, markup=False)
    if ep.error:
        console.print(f"[red]error:[/] {ep.error}", highlight=False)
    for m in ep.messages:
        _print_message(m)


def _print_message(m: dict) -> None:
    role = m.get("role", "?")
    style = {"system": "dim", "user": "green", "assistant": "cyan", "tool": "yellow"}.get(role, "")
    head = f"[{style}]{role}[/]" if style else role
    if role == "tool":
        head += f" ({m.get('name') or ''} {m.get('tool_call_id') or ''})"
    body = m.get("content") or ""
    if role == "system" and len(body) > 400:
        body = body[:400] + f"... [{len(body)} chars]"
    console.print(head + ":", highlight=False)
    if body:
        console.print(body, highlight=False, markup=False)
    for tc in m.get("tool_calls") or []:
        console.print(f"  -> {tc['name']}({json.dumps(tc.get('arguments', {}))})", highlight=False, markup=False)
