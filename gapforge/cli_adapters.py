"""`gapforge adapters RUN`: a run's adapters (capability, status, steps, held-out reward before -> after, path), under
the base model and router the run's stored config names (gapforge/run_config.py)."""

from __future__ import annotations

import typer
from rich.table import Table

from gapforge.cli_common import ConfigOpt, RunArg, SetOpt, console, handle_errors, run_config
from gapforge.evaluation.summary import GRPO_TARGET
from gapforge.model_card import kept_text


@handle_errors
def adapters(run_id: RunArg, config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Table: capability, status, steps, held-out reward before -> after, path."""
    cfg, store = run_config(run_id, config, set_)
    with store:
        rows = store.adapters(run_id)
    routing = f"routing.backend={cfg.routing.backend}" if cfg.routing.enabled else "routing off"
    console.print(f"run {run_id}: base {cfg.policy.local_path or '-'} ({cfg.policy.kind}), {routing}", highlight=False)
    table = Table("adapter", "capability", "status", "steps", "kept", "held-out before -> after", "path")
    for a in rows:
        m = a.metrics
        before, after = m.get("heldout_before"), m.get("heldout_after")
        held = f"{before:.3f} -> {after:.3f}" if before is not None and after is not None else (m.get("error") or "-")
        capability = a.capability or ("(GRPO on the target)" if a.name == GRPO_TARGET else "-")
        table.add_row(a.name, capability, a.status, str(m.get("steps", "-")), kept_text(m), held, a.path or "-")
    console.print(table)


def register(root: typer.Typer) -> None:
    root.command("adapters")(adapters)
