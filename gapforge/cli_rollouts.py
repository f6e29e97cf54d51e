"""`gapforge rollouts ...`: collect episodes of a policy on a target env, list them, show one."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, UsageError, console, get_config, handle_errors
from agents.rollouts import RolloutSummary, rollout_summary
from gapforge.wiring import apply_policy_spec, build_deps, make_target_env_factory, open_store

app = typer.Typer(no_args_is_help=True, help="Collect and inspect rollouts of a policy on a target env.")


def _parse_tasks(raw: str | None, known: list[str]) -> list[str]:
    if not raw:
        return known
    wanted = [t.strip() for t in raw.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in set(known)]
    if unknown:
        raise UsageError(f"unknown task id(s) {', '.join(unknown)}: list them with `gapforge rollouts tasks ENV`")
    return wanted


@app.command("collect")
@handle_errors
def collect_cmd(
    env: Annotated[str | None, typer.Option("--env", help="shop | tau2:retail | tau2:airline | tau2:telecom | toolsandbox[:category]")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="endpoint URL, local model dir, or scripted:ANSWERS.yaml")] = None,
    samples: Annotated[int | None, typer.Option("--samples", min=1, help="episodes per task (K)")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="episodes in flight")] = None,
    tasks: Annotated[str | None, typer.Option("--tasks", help="comma-separated task ids (default: all)")] = None,
    run: Annotated[str | None, typer.Option("--run", help="continue this run id (only missing episodes run)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run the policy on the env's tasks and store every episode (idempotent per run/env/task/sample)."""
    from agents.rollouts import CollectPlan, CollectResult, collect

    cfg = get_config(config, set_)
    env_name = env or cfg.rollouts.env
    probe, make_env = make_target_env_factory(cfg, env_name)
    task_ids = _parse_tasks(tasks or (",".join(cfg.rollouts.tasks) if cfg.rollouts.tasks else None), probe.task_ids())
    families = {t: probe.task_family(t) for t in task_ids}
    probe.close()
    pol_cfg = apply_policy_spec(cfg, policy)
    deps = build_deps(cfg)
    pol = deps.make_policy(pol_cfg)
    store = deps.store
    run_config = {"command": "rollouts collect", "env": env_name, "policy": pol.name, "config": cfg.dump()}
    run_id = store.get_run(run).id if run else store.create_run("rollouts", run_config)
    console.print(f"run {run_id}", highlight=False)
    plan = CollectPlan(
        run_id=run_id,
        env=env_name,
        tasks=task_ids,
        samples=samples or cfg.rollouts.samples,
        concurrency=concurrency or cfg.rollouts.concurrency,
        max_turns=cfg.rollouts.max_turns,
        temperature=pol_cfg.temperature,
    )
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        stored = store.episode_keys(run_id, env_name)  # a resumed run may hold keys outside this plan
        pending = sum(key not in stored for key in plan.keys())
        tid = bar.add_task(f"{env_name} x {pol.name}", total=pending)
        async def run_and_close() -> CollectResult:
            try:
                return await collect(plan, make_env=make_env, policy=pol, sink=store, families=families, on_episode=lambda _ep: bar.advance(tid))
            finally:
                await deps.aclose_policies()  # this command made the policy: it closes it, in the loop that used it

        try:
            result = asyncio.run(run_and_close())
        except KeyboardInterrupt:
            store.set_run_status(run_id, "interrupted")
            console.print(f"interrupted: resume with --run {run_id}\nrun {run_id}", highlight=False)
            raise typer.Exit(130) from None
    store.set_run_status(run_id, "done")
    console.print(f"{result.ran} episodes ran, {result.skipped} already stored, {result.planned} planned")
    render_summary(rollout_summary(store, run_id, env_name))
    console.print(f"run {run_id}", highlight=False)
    deps.close()


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
