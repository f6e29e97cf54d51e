"""`gapforge evaluate RUN` and `gapforge report RUN`: numbers against the baselines, and the report file.

Both take the run's stored config (gapforge/run_config.py: base model, router backend and its stored data,
the `evaluation:` section: trials, family_trials, focus_family, ...) and call the stage the graph's
`evaluate` / `report` nodes call (`gapforge.stages`); flags override the run's settings and the line
`override: ...` says which (`--trials K` = evaluation.trials, `--base DIR` = policy.local_path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    handle_errors,
    run_config,
)
from gapforge.cli_serve import BaseOpt, base_flags, local_base


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    @handle_errors
    def evaluate_cmd(
        run: Annotated[str, typer.Argument(help="run id")],
        env: Annotated[
            str | None, typer.Option("--env", help="target env (default: the env of the run's held-out split)")
        ] = None,
        tasks: Annotated[
            str | None, typer.Option("--tasks", help="comma-separated task ids (default: the run's held-out split)")
        ] = None,
        trials: Annotated[
            int | None, typer.Option("--trials", min=1, help="K trials per task (default: the run's evaluation.trials)")
        ] = None,
        baseline_adapter: Annotated[
            str | None,
            typer.Option(
                "--baseline-adapter",
                help="PEFT dir of the GRPO-on-target baseline (default: the run's own, if trained)",
            ),
        ] = None,
        base: BaseOpt = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """Base vs TRACE (routed) vs each adapter vs the baselines on the held-out split; stored in the evaluations table."""
        import asyncio

        from gapforge.run_lease import run_lease
        from gapforge.stages import open_stages

        flags = [*base_flags(base), *([f"evaluation.trials={trials}"] if trials else [])]
        cfg, store = run_config(run, config, [*(set_ or []), *flags])
        task_ids = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
        if baseline_adapter and not (Path(baseline_adapter) / "adapter_config.json").is_file():
            raise UsageError(
                f"--baseline-adapter {baseline_adapter} is not a PEFT adapter dir (no adapter_config.json)"
            )
        with run_lease(cfg, run, "evaluate"):
            if task_ids is None and (store.get_split(run) is None or not store.capabilities(run)):
                raise UsageError(  # the collection stores the split; the analysis makes it what evaluation reports on
                    f"run {run} is not analysed yet (no held-out split to report on): run `gapforge analyze {run}` first or pass --tasks"
                )
            cfg = local_base(cfg)

            async def go():
                async with open_stages(
                    cfg, store, lambda where, text: console.print(f"{where}: {text}", highlight=False)
                ) as stages:
                    stages.routing.baseline_adapter = baseline_adapter
                    return await stages.evaluate(run, [], env=env, tasks=task_ids)

            shown = f"{len(task_ids)} tasks" if task_ids else "the held-out split"
            console.print(
                f"evaluating {shown} x {cfg.evaluation.trials} trials"
                + (
                    f" (+ evaluation.family_trials {dict(cfg.evaluation.family_trials)})"
                    if cfg.evaluation.family_trials
                    else ""
                ),
                highlight=False,
            )
            done = asyncio.run(go())
        for name, m in done.results.items():
            console.print(
                f"{name:40s} pass {m['pass_rate']:.1%} [{m['ci_low']:.1%}, {m['ci_high']:.1%}]", highlight=False
            )

    @app.command("report")
    @handle_errors
    def report_cmd(
        run: Annotated[str, typer.Argument(help="run id")],
        out: Annotated[str | None, typer.Option("--out", help="directory (default: <workspace>/reports/RUN)")] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """Write report.md with evaluation tables and PNG plots (intervals, held-out curves, routing confusion)."""
        import asyncio

        from gapforge.graph.runner import thread_config
        from gapforge.run_session import inspect_graph
        from gapforge.stages import open_stages

        cfg, store = run_config(run, config, set_)

        async def state(graph: Any) -> dict[str, Any]:  # a graph run's costs (a `rollouts` run has no checkpoint)
            return dict((await graph.aget_state(thread_config(run))).values or {})

        values = inspect_graph(cfg, state)

        async def go():
            async with open_stages(cfg, store) as stages:
                return await stages.report(run, values, out=out)

        done = asyncio.run(go())
        console.print(done.path, highlight=False)
        if done.missing:
            console.print(f"not in the report yet: {', '.join(done.missing)}", highlight=False)
