"""`gapforge rollouts tasks ENV` (an env's task ids and families) and `gapforge rollouts show RUN [--episode ID]` (a
run's episodes and summary, or one trajectory); read-only, no lease. Piped or redirected, the tables print at their full
width: every value whole."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from gapforge.agents.rollouts import RolloutSummary, rollout_summary
from gapforge.cli_common import ConfigOpt, RunArg, SetOpt, UsageError, console, get_config, handle_errors
from gapforge.run_inspect import print_whole
from gapforge.wiring import make_target_env_factory, open_store

NUMBERS = ("id", "sample", "reward", "success", "turns")  # the episode table's columns that are numbers (or yes / no)


def register_show(app: typer.Typer) -> None:
    app.command("tasks")(tasks_cmd)
    app.command("show")(show_cmd)


def render_summary(summary: RolloutSummary) -> None:
    """Print a `agents.rollouts.RolloutSummary` as a table and a terminations line."""
    table = Table(title=f"run {summary.run_id}: {summary.episodes} episodes")
    for col in ("family", "episodes", "pass rate", "mean reward", "mean turns"):
        table.add_column(col, justify="left" if col == "family" else "right", overflow="fold", no_wrap=col != "family")
    for f in summary.families:
        table.add_row(f.family, str(f.episodes), f"{f.pass_rate:.1%}", f"{f.mean_reward:.3f}", f"{f.mean_turns:.1f}")
    print_whole(console, table)
    console.print(
        "terminations: " + ", ".join(f"{k}={v}" for k, v in summary.terminations.most_common()), highlight=False
    )


@handle_errors
def tasks_cmd(
    env: Annotated[
        str,
        typer.Argument(
            help="shop | tau2:retail | mcp:FILE.yaml | trl:FILE.py:Class?rows=FILE | composite:SPEC+SPEC | pkg.module:Class | file.py:Class"
        ),
    ],
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """List an env's task ids and families (a user's class is checked against the protocol first)."""
    probe, _ = make_target_env_factory(get_config(config, set_), env)
    for t in probe.task_ids():
        console.print(f"{t}\t{probe.task_family(t)}", highlight=False)
    probe.close()


@handle_errors
def show_cmd(
    run: RunArg,
    episode: Annotated[int | None, typer.Option("--episode", help="print this episode's trajectory")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """List a run's episodes, or print one trajectory readably."""
    store = open_store(get_config(config, set_), must_exist=True)
    target = store.run_target(run)
    if episode is None:
        if target:
            from gapforge.envs.target_check import describe

            console.print(f"target: {describe(target)}", highlight=False, markup=False)
        table = Table(title=f"run {run}")
        for col in ("id", "env", "task", "sample", "family", "reward", "success", "turns", "termination"):
            # numbers never wrap; on a narrow terminal the names wrap (never an ellipsis); piped, nothing wraps
            table.add_column(col, no_wrap=col in NUMBERS, overflow="fold")
        for r in store.episode_summaries(run):
            cells = (r.env, r.task_id, str(r.sample), r.task_family or "", f"{r.reward:.2f}")
            table.add_row(str(r.id), *cells, "yes" if r.success else "no", str(r.turns), r.termination)
        print_whole(console, table)
        render_summary(rollout_summary(store, run, None))
        return
    ep = store.get_episode(episode)
    if ep.run_id != run:
        raise UsageError(f"episode {episode} belongs to run {ep.run_id}, not {run}")
    console.print(f"[bold]episode {ep.id}[/] {ep.env} task={ep.task_id} sample={ep.sample} policy={ep.policy}")
    console.print(
        f"reward={ep.reward:.3f} success={ep.success} turns={ep.turns} termination={ep.termination} components={ep.components}"
    )
    started = ep.started_at.isoformat(timespec="seconds") if ep.started_at else "?"
    console.print(f"started={started} user_prompt={ep.user_prompt or '-'}", highlight=False)
    if ep.score_info:
        console.print(f"score info: {json.dumps(ep.score_info, default=str)[:2000]}", highlight=False, markup=False)
    for entry in ep.step_info:
        info = json.dumps(entry.get("info"), default=str)[:500]
        console.print(f"step info (turn {entry.get('turn')}): {info}", highlight=False, markup=False)
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
