"""`gapforge env check SPEC [--gold FILE]`: renders gapforge/env_check.py (a target env's reward floors and gold
ceiling) as a table, the tasks behind every flagged row, and the JSON report. Exit 0 when every row holds, 1 when one is
flagged, 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors
from gapforge.env_check import DEFAULT_FLOOR, EnvCheckReport, Outcome, PolicyRow, check_target
from gapforge.paths import check_output_file

SHOWN = 5  # tasks listed per flagged row
_VERDICT = {"ok": "[bold green]ok[/]", "FLAGGED": "[bold red]FLAGGED[/]"}


def register_check(app: typer.Typer) -> None:
    app.command("check")(check_cmd)


@handle_errors
def check_cmd(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="SPEC",
            help="the target, as --env takes it: path/to/file.py:Class | package.module:Class | "
            "mcp:FILE.yaml | trl:FILE.py:Class?rows=FILE | composite:SPEC+SPEC | shop | tau2:retail ...",
        ),
    ],
    gold: Annotated[
        Path | None,
        typer.Option(
            "--gold",
            metavar="FILE",
            help="YAML/JSON: task id -> the agent's turns that solve it (docs/your-agent.md); adds the gold row",
        ),
    ] = None,
    tasks: Annotated[str | None, typer.Option("--tasks", help="comma-separated task ids (default: all)")] = None,
    floor: Annotated[
        float, typer.Option("--floor", min=0.0, max=1.0, help="the most a degenerate policy may score on a task")
    ] = DEFAULT_FLOOR,
    json_out: Annotated[
        Path | None, typer.Option("--json", metavar="OUT", help="write the report as JSON here")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Check a target's reward before collecting: scripted policies play every task.

    do_nothing (a refusal text every turn), random_tool (one random tool call with schema-valid arguments, then text)
    and claim_success ("Done: I have completed your request.") must score at most --floor (0.1) and never succeed on
    a task, except where the task's gold script calls no tool; with --gold, every gold script must score >= 0.99 and
    succeed. An episode the env failed (env_error, timeout) is reported with its error, never as a score, and flags
    its row. Exit 0: every row holds; 1: a row is flagged; 2: bad input.
    """
    cfg = get_config(config, set_)
    check_output_file(json_out, "--json")  # before the episodes run, not after
    with console.status(f"playing the check policies on {spec} ..."):
        report = check_target(cfg, spec, gold_file=gold, tasks=tasks, floor=floor)
    render(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)  # checked writable before the episodes ran
        json_out.write_text(
            json.dumps(report.model_dump(mode="json") | {"passed": report.passed}, indent=2) + "\n", encoding="utf-8"
        )
        console.print(f"JSON report: {json_out}", highlight=False)
    raise typer.Exit(0 if report.passed else 1)


def render(report: EnvCheckReport) -> None:
    """The table, then what broke each flagged row, what was exempt, and the verdict line."""
    table = Table(title=f"reward check of {report.env} ({len(report.tasks)} tasks)")
    numbers = ("episodes", "mean reward", "success rate")
    for col in ("policy", *numbers, "should score", "verdict"):
        table.add_column(col, justify="right" if col in numbers else "left", no_wrap=col in ("policy", "should score"))
    for row in report.rows:
        n = len(row.env_failures)
        failed = f" ({n} env failure{'s' * (n > 1)})" if n else ""
        rates = _num(row.mean_reward, "{:.3f}"), _num(row.success_rate, "{:.0%}")
        table.add_row(row.policy, f"{row.episodes}{failed}", *rates, row.should_score, _VERDICT[row.verdict])
    console.print(table)
    for row in report.rows:
        _details(row)
    verdict = (
        "[bold green]every row holds[/]"
        if report.passed
        else "[bold red]FLAGGED[/]: " + ", ".join(r.policy for r in report.rows if r.verdict != "ok")
    )
    console.print(
        f"{verdict} ({report.seconds:.1f}s; episode time limit {report.episode_time_limit_s:g} s)", highlight=False
    )


def _details(row: PolicyRow) -> None:
    limit = "below its ceiling" if row.policy == "gold" else "above its floor"
    for what, items in ((limit, row.broken), ("the env failed (no score)", row.env_failures)):
        if items:
            console.print(f"[bold]{row.policy}[/]: {what} on {len(items)} task(s):", highlight=False)
            for o in items[:SHOWN]:
                console.print("  " + escape(_line(o)), highlight=False)
            if len(items) > SHOWN:
                console.print(f"  ... and {len(items) - SHOWN} more (--json lists them all)", highlight=False)
    if row.exempt:
        tasks = ", ".join(
            f"{o.task} (reward {o.reward:.2f}{', success' if o.success else ''})" for o in row.exempt[:SHOWN]
        )
        console.print(escape(f"{row.policy}: exempt on {tasks}: the gold script calls no tool there"), highlight=False)
    if row.no_gold:
        more = f" and {len(row.no_gold) - SHOWN} more" if len(row.no_gold) > SHOWN else ""
        console.print(escape(f"{row.policy}: no gold for {', '.join(row.no_gold[:SHOWN])}{more}"), highlight=False)


def _line(o: Outcome) -> str:
    if not o.scored:
        return f"{o.task}: {o.termination}: {o.error}"
    return f"{o.task}: reward {o.reward:.2f}, {'success' if o.success else 'no success'} ({o.termination})"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
