"""`gapforge synthesize RUN [--capability NAME]`: the generator / validator repair loop for each
retained capability of a run (progress per capability and attempt, then a table of
capabilities x attempts x verdicts). Exit 0 when every capability got an env, 1 when one
ended unsynthesized, 2 for bad input, 3 when an endpoint or the sandbox kept failing past
its retries (what finished is stored; no attempt is blamed for it; the line says how to resume). Accepted modules: WORKSPACE/synthetic_envs/RUN/CAPABILITY.py."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.table import Table

from agents.errors import IncompleteStage
from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    get_config,
    handle_errors,
)

_STYLE = {"accepted": "[bold green]accepted[/]", "failed": "[bold red]failed[/]", "rejected": "[red]rejected[/]",
          "unsynthesized": "[bold red]unsynthesized[/]"}


@handle_errors
def command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run whose retained capabilities get envs")],
    capability: Annotated[list[str] | None, typer.Option("--capability", help="only this capability (repeatable)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Write, validate and repair one synthetic env per retained capability of RUN (resumes where it stopped)."""
    from agents.synthesis.service import asynthesize_capability
    from gapforge.run_lease import run_lease
    from gapforge.wiring import build_deps

    cfg = get_config(config, set_)
    deps = build_deps(cfg, pool_size=min(cfg.sandbox.pool_size, 2))
    store = deps.store
    stopped: IncompleteStage | None = None
    try:
        with run_lease(cfg, run_id, "synthesize"):
            retained = [c.name for c in store.capabilities(run_id, retained=True)]
            if not retained:
                raise UsageError(f"run {run_id!r} has no retained capability: run `gapforge analyze {run_id}` first")
            unknown = [c for c in capability or [] if c not in retained]
            if unknown:
                raise UsageError(f"--capability {unknown[0]!r} is not a retained capability of run {run_id!r}: choose from {', '.join(retained)}")
            chosen = capability or retained
            results = []
            with console.status("synthesizing ...") as status:
                def progress(cap: str, attempt: int, what: str) -> None:
                    status.update(f"[bold]{cap}[/] attempt {attempt}/{cfg.synthesis.max_attempts}: {what}")
                    if what.startswith(("accepted", "failed", "rejected")):
                        console.print(f"{cap} attempt {attempt}: {_STYLE.get(what.split(':')[0], what)}{what[len(what.split(':')[0]):]}",
                                      highlight=False)

                async def synthesize_then_close() -> None:
                    # One loop: the readiness policy the deps make is used and closed on it (its HTTP session is this loop's).
                    try:
                        for cap in chosen:
                            try:
                                results.append(await asynthesize_capability(deps, run_id, cap, progress))
                            except LookupError as e:
                                raise UsageError(str(e)) from None
                    finally:
                        await deps.aclose_policies()

                try:
                    asyncio.run(synthesize_then_close())
                except IncompleteStage as e:
                    stopped = e.with_resume(f"gapforge synthesize {run_id}")
    finally:
        deps.close()
    _print_table(results)
    if stopped is not None:
        raise stopped
    for r in results:
        if r.status == "accepted":
            console.print(f"{r.capability}: {r.module_path}  (re-run by hand: gapforge env validate {r.module_path})", highlight=False)
        else:
            console.print(f"{r.capability}: [bold red]unsynthesized[/] - {r.reason}", highlight=False)
    raise typer.Exit(0 if all(r.status == "accepted" for r in results) else 1)


def _print_table(results: list) -> None:
    table = Table(title="environment synthesis")
    for col in ("capability", "attempt", "status", "failed checks", "review", "rollouts", "s"):
        table.add_column(col, justify="right" if col in ("attempt", "rollouts", "s") else "left")
    for r in results:
        for a in r.attempts:
            table.add_row(r.capability, str(a.attempt), _STYLE.get(a.status, a.status), ", ".join(a.failed_checks) or "-",
                          a.review or "-", str(a.rollouts), f"{a.seconds:.1f}" + (" (stored)" if a.resumed else ""))
        table.add_row(r.capability, "", _STYLE.get(r.status, r.status), r.reason or "", "", str(r.rollouts), "", end_section=True)
    console.print(table)


def register(app: typer.Typer) -> None:
    """`gapforge synthesize RUN` is a top-level command, not a group (gapforge/cli.py calls this)."""
    app.command("synthesize")(command)
