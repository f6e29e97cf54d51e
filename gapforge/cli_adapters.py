"""`gapforge adapters RUN`: a run's adapters (capability, status, steps, held-out reward before -> after, path), under
the base model and router the run's stored config names (gapforge/run_config.py)."""

from __future__ import annotations

import typer
from rich.table import Table

from gapforge.cli_common import ConfigOpt, RunArg, SetOpt, console, handle_errors, run_config


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
        table.add_row(
            a.name, a.capability or "-", a.status, str(m.get("steps", "-")), kept_text(m), held, a.path or "-"
        )
    console.print(table)


def kept_text(metrics: dict) -> str:
    """The checkpoint kept and why: step 0 is the untrained adapter (no step beat it by more than the
    held-out noise, training.selection.beats_step0); otherwise the paired gain over step 0 and its lower bound."""
    step = metrics.get("best_step")
    if step is None:
        return "-"
    if step == 0:
        return "step 0 (untrained)"
    margin = next((e.get("vs_step0") for e in metrics.get("curve") or [] if e.get("step") == step), None)
    if not margin:
        return f"step {step}"
    return f"step {step} (+{margin['diff']:.3f}, low {margin['low']:+.3f}, n {margin['n']})"


def register(root: typer.Typer) -> None:
    root.command("adapters")(adapters)
