"""`gapforge evaluate RUN` and `gapforge report RUN`: numbers against the baselines, and the report file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    get_config,
    handle_errors,
)
from gapforge.cli_serve import BaseOpt, base_model_dir
from gapforge.wiring import make_target_env_factory, open_store


def report_dir(cfg, run: str) -> Path:
    """Where `gapforge report RUN` writes (gapforge state links here)."""
    return cfg.workspace / "reports" / run


def _heldout_tasks(store, run: str, tasks: str | None, known: list[str]) -> list[str]:
    """--tasks, else the held-out split the analysis stored with the run (never the analysis split)."""
    if tasks:
        wanted = [t.strip() for t in tasks.split(",") if t.strip()]
    else:
        split = store.get_split(run)
        if split is None:
            raise UsageError(f"run {run} has no stored analysis/held-out split: run `gapforge analyze {run}` first or pass --tasks")
        wanted = list(split.heldout_tasks)
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise UsageError(f"unknown task id(s) {', '.join(unknown)}: list them with `gapforge rollouts tasks ENV`")
    return wanted


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    @handle_errors
    def evaluate_cmd(
        run: Annotated[str, typer.Argument(help="run id")],
        env: Annotated[str | None, typer.Option("--env", help="target env (default rollouts.env)")] = None,
        tasks: Annotated[str | None, typer.Option("--tasks", help="comma-separated task ids (default: the run's held-out split)")] = None,
        trials: Annotated[int | None, typer.Option("--trials", min=1, help="K trials per task (default evaluation.trials)")] = None,
        baseline_adapter: Annotated[str | None, typer.Option("--baseline-adapter", help="PEFT dir of the GRPO-on-target baseline")] = None,
        base: BaseOpt = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """Base vs TRACE (routed) vs each adapter vs the baselines on the held-out split; stored in the evaluations table."""
        import asyncio

        from evaluation.policies import GRPO_TARGET
        from evaluation.service import (
            build_router,
            evaluate_run,
            load_backend,
            run_artifacts,
        )
        from gapforge.run_lease import run_lease

        cfg = get_config(config, set_)
        trials = trials or cfg.evaluation.trials
        store = open_store(cfg)
        with run_lease(cfg, run, "evaluate"):
            store.get_run(run)
            split = store.get_split(run)
            env_name = env or (split.env if split is not None else cfg.rollouts.env)
            probe, make_env = make_target_env_factory(cfg, env_name)
            task_ids = _heldout_tasks(store, run, tasks, probe.task_ids())
            families = {t: probe.task_family(t) for t in task_ids}
            probe.close()
            if baseline_adapter and not (Path(baseline_adapter) / "adapter_config.json").is_file():
                raise UsageError(f"--baseline-adapter {baseline_adapter} is not a PEFT adapter dir (no adapter_config.json)")
            base_dir = base_model_dir(cfg, base)
            artifacts = run_artifacts(store, run, max_example_chars=cfg.routing.max_example_chars)
            extra = {GRPO_TARGET: baseline_adapter} if baseline_adapter else {}
            backend = load_backend(base_dir, artifacts, extra_adapters=extra, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed)
            router = build_router(artifacts, routing=cfg.routing, backend=backend, tokenizer_path=base_dir)
            console.print(f"evaluating {len(task_ids)} tasks x {trials} trials on {env_name}", highlight=False)
            result = asyncio.run(
                evaluate_run(store, run, backend=backend, router=router, artifacts=artifacts, env=env_name, make_env=make_env, tasks=task_ids,
                             families=families, trials=trials, max_turns=cfg.rollouts.max_turns, temperature=cfg.policy.temperature,
                             concurrency=cfg.rollouts.concurrency, grpo_target=bool(baseline_adapter), seed=cfg.seed)
            )
            for p in result.policies:
                pr = p.metrics["pass_rate"]
                console.print(f"{p.name:40s} pass {pr['value']:.1%} [{pr['low']:.1%}, {pr['high']:.1%}]", highlight=False)

    @app.command("report")
    @handle_errors
    def report_cmd(
        run: Annotated[str, typer.Argument(help="run id")],
        out: Annotated[str | None, typer.Option("--out", help="directory (default: <workspace>/reports/RUN)")] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """Write report.md with evaluation tables and PNG plots (intervals, held-out curves, routing confusion)."""
        from evaluation.report import write_report

        cfg = get_config(config, set_)
        store = open_store(cfg)
        store.get_run(run)
        result = write_report(store, run, Path(out) if out else report_dir(cfg, run))
        console.print(str(result.path), highlight=False)
        if result.missing:
            console.print(f"not in the report yet: {', '.join(result.missing)}", highlight=False)
