"""`gapforge env validate PATH`: the self-test of a synthetic env module (DESIGN.md §5),
run in the sandbox. Prints a table and writes the JSON report; exit 0 only when
every required check passes, 1 when one failed, 2 for bad input."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors
from gapforge.config import GapforgeConfig
from gapforge.wiring import build_deps

if TYPE_CHECKING:
    from agents.selftest import ValidationOutcome

app = typer.Typer(no_args_is_help=True, help="Synthetic environments: self-test a generated env module.")

_STYLE = {"PASS": "[bold green]PASS[/]", "FAIL": "[bold red]FAIL[/]", "SKIP": "[yellow]SKIP[/]"}


@app.command("validate")
@handle_errors
def validate(
    path: Annotated[Path, typer.Argument(help="the env module (.py) to validate")],
    target: Annotated[str | None, typer.Option("--target", help="target env whose tools must match: shop | tau2:retail | ...")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="seeds per check (default: synthesis.validation_seeds)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the JSON report here (default: WORKSPACE/validations/)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run the self-test checks on PATH in the sandbox."""
    cfg = get_config(config, set_)
    outcome = run_validation(cfg, path, target=target, seeds=seeds, json_out=json_out)
    raise typer.Exit(0 if outcome.passed else 1)


def run_validation(cfg: GapforgeConfig, path: Path, *, target: str | None = None, seeds: int | None = None,
                   json_out: Path | None = None) -> ValidationOutcome:
    """Render `agents.selftest.validate_module` for the terminal: a status line, the table, the verdict."""
    from agents.selftest import validate_module

    n_seeds = seeds if seeds is not None else cfg.synthesis.validation_seeds
    with (
        build_deps(cfg, pool_size=min(cfg.sandbox.pool_size, 2)) as deps,
        console.status(f"validating {path.name} ({n_seeds} seeds)...") as status,
    ):
        policy = deps.make_policy() if cfg.policy.kind != "scripted" else None
        outcome = validate_module(
            deps, path, seeds=n_seeds, target=target, policy=policy, report_dir=cfg.workspace / "validations", json_out=json_out,
            progress=lambda name: status.update(f"validating {path.name}: check [bold]{name}[/] ..."),
        )
    _print_table(outcome.report)
    verdict = "[bold green]PASSED[/]" if outcome.passed else "[bold red]FAILED[/]"
    console.print(f"{verdict} in {outcome.report.seconds:.1f}s; JSON report: {outcome.json_path}", highlight=False)
    return outcome


def _print_table(report: Any) -> None:
    title = f"self-test of {Path(report.module).name}" + (f" ({report.capability})" if report.capability else "")
    table = Table(title=title, show_lines=False)
    table.add_column("check")
    table.add_column("verdict")
    table.add_column("s", justify="right")
    table.add_column("evidence")
    for check in report.checks:
        table.add_row(check.name + ("" if check.required else " (optional)"), _STYLE[check.verdict], f"{check.seconds:.2f}", check.summary[:240])
    console.print(table)
