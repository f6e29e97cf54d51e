"""`gapforge train RUN [--capability NAME] [--module PATH]` (the table of results: `gapforge adapters RUN`).

train: the stage the graph's `train` node calls (`gapforge.stages`, with the run's stored config): one
GRPO + LoRA job per capability, each in its own process, as many at once as the training slots allow, on
the capability's accepted synthetic env in the sandbox (or on `--module`, e.g.
envs/examples/precondition_verification.py). Adapters: WORKSPACE/adapters/RUN/CAPABILITY. Progress: one
line per GRPO step (reward, informative-group share).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    handle_errors,
    run_config,
)
from gapforge.cli_serve import local_base

if TYPE_CHECKING:
    from gapforge.store import Store


def _capabilities(store: Store, run_id: str, capability: str | None, module: Path | None) -> list[str]:
    """The capabilities to train: those with an accepted synthetic env (or the one `--module` is for)."""
    if module is not None:
        if not module.is_file():
            raise UsageError(f"--module {module}: file not found")
        return [capability or module.stem]
    accepted = sorted({e.capability for e in store.synthetic_envs(run_id, capability) if e.status == "accepted"})
    if not accepted:
        raise UsageError(
            f"run {run_id} has no validated synthetic env{' for ' + capability if capability else ''}: "
            "run `gapforge synthesize` first, or pass --module PATH"
        )
    return accepted


@handle_errors
def train(
    run_id: str = typer.Argument(..., help="run id"),
    capability: str | None = typer.Option(None, "--capability", help="only this capability"),
    module: Path | None = typer.Option(
        None, "--module", help="train on this env module instead of the run's validated env"
    ),
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Train the run's adapters (resumes killed jobs; finished ones are kept)."""
    import asyncio

    from gapforge.run_lease import run_lease
    from gapforge.stages import open_stages

    cfg, store = run_config(run_id, config, set_)
    if not cfg.policy.local_path:
        raise UsageError("set policy.local_path to the base model directory (e.g. the one `gapforge dev teach` prints)")
    cfg = local_base(cfg, "pass --set policy.local_path=DIR (the base model's weights)")
    caps = _capabilities(store, run_id, capability, module)

    async def go():
        async with open_stages(
            cfg, store, lambda where, text: console.print(f"[{where.removeprefix('train ')}] {text}", highlight=False)
        ) as stages:
            return await asyncio.gather(
                *(stages.train(run_id, c, module=str(module) if module else None) for c in caps)
            )

    with run_lease(cfg, run_id, "train"):
        done = asyncio.run(go())
    from gapforge.store.workspace import Workspace

    num = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for d in done:
        if d.trained:
            console.print(
                f"{d.capability}: held-out {num(d.heldout_before)} -> {num(d.heldout_after)} (kept step {d.kept_step}), "
                f"adapter {Workspace(cfg.workspace).adapter_dir(run_id, d.capability)}",
                highlight=False,
            )
        else:
            console.print(f"{d.capability}: [red]failed[/] ({d.error})", highlight=False)
    if not all(d.trained for d in done):
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    """`gapforge train RUN` is a top-level command."""
    root.command("train")(train)
