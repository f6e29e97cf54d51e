"""`gapforge synthesize RUN [--capability NAME]`: the graph's generator / validator repair loop
(graph/capability.py `repair`, through `gapforge.stages`) for each retained capability of a run, with
the run's stored config (gapforge/run_config.py) (progress per capability and attempt, then a table of
capabilities x attempts x verdicts). Exit 0 when every capability got an env, 1 when one
ended unsynthesized, 2 for bad input, 3 when an endpoint or the sandbox kept failing past
its retries (what finished is stored; no attempt is blamed for it; the line says how to resume).
Accepted modules: WORKSPACE/synthetic_envs/RUN/CAPABILITY.py."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.table import Table

from gapforge.agents.errors import IncompleteStage
from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    handle_errors,
    run_config,
)

_STYLE = {
    "accepted": "[bold green]accepted[/]",
    "failed": "[bold red]failed[/]",
    "rejected": "[red]rejected[/]",
    "unsynthesized": "[bold red]unsynthesized[/]",
}


@handle_errors
def command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run whose retained capabilities get envs")],
    capability: Annotated[
        list[str] | None, typer.Option("--capability", help="only this capability (repeatable)")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Write, validate and repair one synthetic env per retained capability of RUN (resumes where it stopped)."""
    from gapforge.run_lease import run_lease
    from gapforge.stages import open_stages
    from gapforge.stages.synthesis import synthesize_capability

    cfg, store = run_config(run_id, config, set_)
    stopped: IncompleteStage | None = None
    results: list = []
    try:
        with run_lease(cfg, run_id, "synthesize"):
            retained = [c.name for c in store.capabilities(run_id, retained=True)]
            if not retained:
                raise UsageError(f"run {run_id!r} has no retained capability: run `gapforge analyze {run_id}` first")
            unknown = [c for c in capability or [] if c not in retained]
            if unknown:
                raise UsageError(
                    f"--capability {unknown[0]!r} is not a retained capability of run {run_id!r}: choose from {', '.join(retained)}"
                )
            chosen = capability or retained
            with console.status("synthesizing ...") as status:

                def progress(where: str, text: str) -> None:  # ("synthesize CAP", "attempt N: what") from the stage
                    cap, (attempt, _, what) = where.removeprefix("synthesize "), text.partition(": ")
                    status.update(f"[bold]{cap}[/] {attempt}/{cfg.synthesis.max_attempts}: {what}")
                    head = what.split(":")[0]
                    if head in ("accepted", "failed", "rejected"):
                        console.print(f"{cap} {attempt}: {_STYLE.get(head, head)}{what[len(head) :]}", highlight=False)

                async def synthesize_all() -> None:
                    # One loop: the readiness policy the stages make is used and closed on it (its HTTP session is this loop's).
                    async with open_stages(cfg, store, progress, pool_size=min(cfg.sandbox.pool_size, 2)) as stages:
                        for cap in chosen:
                            results.append(await synthesize_capability(stages, run_id, cap))

                try:
                    asyncio.run(synthesize_all())
                except IncompleteStage as e:
                    stopped = e.with_resume(f"gapforge synthesize {run_id}")
    finally:
        store.close()
    _print_table(results)
    if stopped is not None:
        raise stopped
    for r in results:
        if r.status == "accepted":
            console.print(
                f"{r.capability}: {r.module_path}  (re-run by hand: gapforge env validate {r.module_path})",
                highlight=False,
            )
        else:
            console.print(f"{r.capability}: [bold red]unsynthesized[/] - {r.reason}", highlight=False)
    raise typer.Exit(0 if all(r.status == "accepted" for r in results) else 1)


def _print_table(results: list) -> None:
    table = Table(title="environment synthesis")
    for col in ("capability", "attempt", "status", "failed checks", "review", "rollouts", "s"):
        table.add_column(col, justify="right" if col in ("attempt", "rollouts", "s") else "left")
    for r in results:
        for a in r.attempts:
            table.add_row(
                r.capability,
                str(a.attempt),
                _STYLE.get(a.status, a.status),
                ", ".join(a.failed_checks) or "-",
                a.review or "-",
                str(a.rollouts),
                f"{a.seconds:.1f}" + (" (stored)" if a.resumed else ""),
            )
        table.add_row(
            r.capability, "", _STYLE.get(r.status, r.status), r.reason or "", "", str(r.rollouts), "", end_section=True
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    """`gapforge synthesize RUN` is a top-level command, not a group (gapforge/cli.py calls this)."""
    app.command("synthesize")(command)
