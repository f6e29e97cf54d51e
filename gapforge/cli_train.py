"""`gapforge train RUN [--capability NAME] [--module PATH]` (the table of results: `gapforge adapters RUN`).

train: one GRPO + LoRA job per capability, each in its own process
(`python -m training.run`), on the capability's validated synthetic env in the
sandbox (or on `--module`, e.g. envs/examples/precondition_verification.py).
Progress: step, reward, informative-group share, held-out reward.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    get_config,
    handle_errors,
)

VALIDATED = ("validated", "passed", "accepted")


def _jobs(cfg, run_id: str, capability: str | None, module: Path | None):
    from store.db import Store
    from training.envs import EnvSpec
    from training.service import TrainJob

    if not cfg.policy.local_path:
        raise UsageError("set policy.local_path to the base model directory (e.g. the one `gapforge dev teach` prints)")
    root = cfg.workspace / "runs" / run_id
    sandbox = cfg.sandbox.model_dump(mode="json")
    specs: list[tuple[str, str]] = []
    if module is not None:
        if not module.is_file():
            raise UsageError(f"--module {module}: file not found")
        specs.append((capability or module.stem, str(module.resolve())))
    else:
        with Store(cfg.store_url) as store:
            store.get_run(run_id)
            envs = [e for e in store.synthetic_envs(run_id, capability) if e.status in VALIDATED]
        if not envs:
            raise UsageError(f"run {run_id} has no validated synthetic env{' for ' + capability if capability else ''}: "
                             "run `gapforge synthesize` first, or pass --module PATH")
        latest = {}
        for e in sorted(envs, key=lambda e: e.attempt):
            latest[e.capability] = e
        for cap, e in latest.items():
            path = root / "envs" / f"{cap}-{e.sha256[:12]}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(e.code)
            specs.append((cap, str(path)))
    return [TrainJob(name=cap, capability=cap, base_model=str(cfg.policy.local_path),
                     env=EnvSpec(kind="sandbox", module=path, sandbox=sandbox), config=cfg.training,
                     out_dir=str(root / "adapters" / cap), store_url=cfg.store_url, run_id=run_id) for cap, path in specs]


def _show(name: str, row: dict) -> None:
    ev = row.get("event")
    if ev == "step":
        console.print(f"[{name}] step {row['step']}/{row['max_steps']}  reward {row['reward']:.3f}  informative groups "
                      f"{row['informative_share']:.0%}  env failures {len(row['failures'])}  "
                      f"(gen {row['gen_s']:.1f}s, env {row['env_s']:.2f}s)", highlight=False)
    elif ev == "heldout":
        console.print(f"[{name}] held-out reward {row['reward']:.3f} at step {row['step']}", highlight=False)
    elif ev == "failed":
        console.print(f"[{name}] [red]failed[/]: {row['error']}", highlight=False)


@handle_errors
def train(run_id: str = typer.Argument(..., help="run id"),
          capability: str | None = typer.Option(None, "--capability", help="only this capability"),
          module: Path | None = typer.Option(None, "--module", help="train on this env module instead of the run's validated env"),
          config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Train the run's adapters (resumes killed jobs; finished ones are kept)."""
    from gapforge.run_lease import run_lease
    from gapforge.executor_wiring import job_runner

    cfg = get_config(config, set_)
    jobs = _jobs(cfg, run_id, capability, module)
    with run_lease(cfg, run_id, "train"):
        outcomes = job_runner(cfg)(jobs, cfg.workspace / "runs" / run_id / "train-specs", on_line=_show)
    for o in outcomes:
        if o.result is not None:
            r = o.result
            console.print(f"{o.name}: held-out {r.heldout_before:.3f} -> {r.heldout_after:.3f} (best step {r.best_step}), "
                          f"adapter {r.adapter_path}", highlight=False)
        else:
            console.print(f"{o.name}: [red]failed[/] ({o.error})", highlight=False)
    if any(o.result is None for o in outcomes):
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    """`gapforge train RUN` is a top-level command."""
    root.command("train")(train)
