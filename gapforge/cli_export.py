"""`gapforge export RUN DIR`: the run's kept adapters with model cards, its router and a `serve.sh`, as a bundle that
serves without the store (gapforge/export.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gapforge.cli_common import ConfigOpt, RunArg, SetOpt, console, handle_errors, run_config


@handle_errors
def export(
    run_id: RunArg,
    out: Annotated[Path, typer.Argument(help="a new (or empty) directory for the bundle")],
    base_model: Annotated[
        str | None,
        typer.Option("--base-model", help="the base model's name in model cards and serve.sh (e.g. a Hub id)"),
    ] = None,
    trl: Annotated[
        bool,
        typer.Option(
            "--trl", help="also each synthetic env as a TRL environment + dataset (LLM-written code: read it)"
        ),
    ] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Write the run's adapters (PEFT files + model card each), its router and serve.sh to OUT."""
    from gapforge.export import export_run

    cfg, store = run_config(run_id, config, set_)
    with store:
        done = export_run(
            store,
            run_id,
            out,
            cfg,
            base_model=base_model,
            trl=trl,
            say=lambda line: console.print(line, highlight=False, soft_wrap=True),
        )
    console.print(
        f"exported run {run_id} to {done.out}: {len(done.adapters)} adapters, {done.files} files; "
        f"serve it: gapforge serve --router {done.out / 'router'} --base BASE_DIR (or BASE_DIR=... {done.out / 'serve.sh'})",
        highlight=False,
        soft_wrap=True,
    )


def register(root: typer.Typer) -> None:
    root.command("export")(export)
