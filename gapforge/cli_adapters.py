"""`gapforge adapters RUN`: a run's adapters (capability, status, steps, held-out reward before -> after, path)."""

from __future__ import annotations

import typer
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors



@handle_errors
def adapters(run_id: str = typer.Argument(..., help="run id"), config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Table: capability, status, steps, held-out reward before -> after, path."""
    from store.db import Store

    cfg = get_config(config, set_)
    with Store(cfg.store_url) as store:
        rows = store.adapters(run_id)
    table = Table("adapter", "capability", "status", "steps", "held-out before -> after", "path")
    for a in rows:
        m = a.metrics
        before, after = m.get("heldout_before"), m.get("heldout_after")
        held = f"{before:.3f} -> {after:.3f}" if before is not None and after is not None else (m.get("error") or "-")
        table.add_row(a.name, a.capability or "-", a.status, str(m.get("steps", "-")), held, a.path or "-")
    console.print(table)


def register(root: typer.Typer) -> None:
    """`gapforge adapters RUN` is a top-level command."""
    root.command("adapters")(adapters)
