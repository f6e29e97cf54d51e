"""The rollout-scaling curve of a run (evaluation.scaling_curve; the paper's Fig. 4): after the evaluation, routed
TRACE with every adapter at its k-th kept training step and GRPO on the target at its k-th, for each curve point
k > 0 (evaluation.rollout_scaling says what the points are and where they are stored).

Each point plays the run's held-out tasks with the run's trials (family_trials, min_family_episodes) through the
same evaluation service, policies and worker processes as the evaluation; the base's stored episodes are copied
into the point's base child run first, so no point plays the base again and every point is paired with the same
base episodes (common random numbers). The router is the run's own (it routes from the task's first user message
with the base weights; the adapters it routes to are the point's). Resumable: a point's stored episodes are kept.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gapforge.executor_wiring import evaluation_players
from gapforge.stages.common import StageContext
from gapforge.stages.routing import Routing


class _AlwaysBase:
    """A 'policy' for evaluation.reuse.copy_base_episodes that plays every task with the base: copy them all."""

    adapters: dict[str, Any] = {}
    base = None

    async def decide(self, messages: Any) -> None:
        return None


async def evaluate_scaling(
    sc: StageContext,
    routing: Routing,
    run_id: str,
    *,
    env: str,
    make_env: Any,
    tasks: list[str],
    families: dict[str, str],
) -> int:
    """Evaluate every curve point k > 0 of the run (runs `<run>.scale-k`); returns the episodes played."""
    from gapforge.evaluation.policies import GRPO_TARGET
    from gapforge.evaluation.reuse import copy_base_episodes
    from gapforge.evaluation.rollout_scaling import curve_points, scale_run_id
    from gapforge.evaluation.run import EvalPlan, child_run_id
    from gapforge.evaluation.service import RunArtifacts, evaluate_run, load_backend

    cfg, ecfg, store = sc.cfg, sc.cfg.evaluation, sc.store
    artifacts, _, router = await asyncio.to_thread(routing.routed, run_id)
    base_row = await asyncio.to_thread(store.get_evaluation, run_id, "eval:base")
    if base_row is None:
        raise ValueError(
            f"run {run_id}: the base is not evaluated yet (the scaling curve pairs every point with its episodes)"
        )
    adapter_rows = await asyncio.to_thread(store.adapters, run_id)
    names = [c["adapter"] for c in artifacts.capabilities]
    with_grpo = any(a.name == GRPO_TARGET and a.status == "done" for a in adapter_rows)
    points = curve_points(
        adapter_rows, names, [GRPO_TARGET] if with_grpo else []
    )  # a baseline stopped early: TRACE alone later
    plan = EvalPlan(
        run_id,
        env,
        tasks,
        trials=ecfg.trials,
        family_trials=ecfg.family_trials,
        family_trials_policies=tuple(ecfg.family_trials_policies),
        min_family_episodes=ecfg.min_family_episodes,
    )
    played = 0
    for k, point in enumerate(points):
        if k == 0:  # the fresh adapters: the base itself (evaluation.rollout_scaling)
            continue
        run_k = scale_run_id(run_id, k)
        await asyncio.to_thread(
            store.create_run,
            "evaluation",
            {"parent": run_id, "scaling_point": k, "steps": {n: c["step"] for n, c in point.items()}},
            run_k,
            exist_ok=True,
        )
        base_child = child_run_id(run_k, "base")
        await asyncio.to_thread(
            store.create_run,
            "evaluation",
            {"parent": run_k, "policy": "base", "copied_from": base_row.metrics["child_run"]},
            base_child,
            exist_ok=True,
        )
        await copy_base_episodes(
            store,
            policy=_AlwaysBase(),
            env=env,
            base_child=base_row.metrics["child_run"],
            child=base_child,
            counts=plan.task_trials("base", families),
        )
        art_k = RunArtifacts(run_id, artifacts.capabilities, {n: Path(point[n]["path"]) for n in names})
        grpo_path = Path(point[GRPO_TARGET]["path"]) if GRPO_TARGET in point else None
        backend = await asyncio.to_thread(
            load_backend,
            sc.base_dir(),
            art_k,
            extra_adapters={GRPO_TARGET: grpo_path} if grpo_path else None,
            max_new_tokens=cfg.policy.max_new_tokens,
            seed=cfg.seed,
        )
        sc.progress(
            "evaluate",
            f"scaling point {k}/{len(points) - 1}: steps " + ", ".join(f"{n} {c['step']}" for n, c in point.items()),
        )
        async with evaluation_players(
            cfg, store, run_id, sc.base_dir(), art_k, make_env, router, baseline_path=grpo_path
        ) as players:
            result = await evaluate_run(
                store,
                run_k,
                backend=backend,
                router=router,
                artifacts=art_k,
                env=env,
                make_env=make_env,
                tasks=tasks,
                families=families,
                trials=ecfg.trials,
                max_turns=cfg.rollouts.max_turns,
                temperature=cfg.policy.temperature,
                concurrency=cfg.rollouts.concurrency,
                grpo_target=grpo_path is not None,
                seed=cfg.seed,
                family_trials=ecfg.family_trials,
                family_trials_policies=ecfg.family_trials_policies,
                focus_family=ecfg.focus_family,
                min_family_episodes=ecfg.min_family_episodes,
                players=players,
                on_policy_done=lambda name, k=k: sc.progress(
                    "evaluate", f"scaling point {k}: {name}: played and scored"
                ),
                together=cfg.executor.kind == "local",
            )
        played += sum(int(p.metrics.get("episodes", 0)) for p in result.policies if p.name != "base")
    return played
