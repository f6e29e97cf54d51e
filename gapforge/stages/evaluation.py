"""`evaluate`: base vs TRACE (routed) vs each adapter vs the baselines on the held-out split (evaluation.service)."""

from __future__ import annotations

import asyncio
from typing import Any

from gapforge.executor_wiring import evaluation_players
from gapforge.stages.common import StageContext, require
from gapforge.stages.routing import Routing
from gapforge.wiring import make_target_env_factory
from graph.context import Cost, EvaluationDone, StageFailed


async def evaluate(sc: StageContext, routing: Routing, run_id: str, capabilities: list[str], *, env: str | None = None,
                   tasks: list[str] | None = None) -> EvaluationDone:
    """The held-out split the analysis stored with the run (its env and tasks), unless `env` / `tasks` name others
    (`gapforge evaluate --env / --tasks`)."""
    require("evaluation.service", "evaluation")
    from evaluation.policies import GRPO_TARGET
    from evaluation.service import evaluate_run

    cfg, ecfg = sc.cfg, sc.cfg.evaluation
    split = await asyncio.to_thread(sc.store.get_split, run_id)
    if split is None and tasks is None:
        raise StageFailed("no held-out split stored with the run (the analysis stores it)")
    env_name = env or (split.env if split is not None else cfg.rollouts.env)
    artifacts, backend, router = await asyncio.to_thread(routing.routed, run_id)
    probe, make_env = make_target_env_factory(cfg, env_name)
    try:
        tasks = list(split.heldout_tasks) if tasks is None else list(tasks)  # type: ignore[union-attr]
        unknown = sorted(set(tasks) - set(probe.task_ids()))
        if unknown:
            raise StageFailed(f"unknown task id(s) {', '.join(unknown)} in {env_name}: list them with `gapforge rollouts tasks {env_name}`")
        families = {t: probe.task_family(t) for t in tasks}
    finally:
        probe.close()
    async with evaluation_players(cfg, sc.store, run_id, sc.base_dir(), artifacts, make_env, router) as players:  # None: every policy plays here
        result = await evaluate_run(
            sc.store, run_id, backend=backend, router=router, artifacts=artifacts, env=env_name, make_env=make_env, tasks=tasks,
            families=families, trials=ecfg.trials, max_turns=cfg.rollouts.max_turns, temperature=cfg.policy.temperature,
            concurrency=cfg.rollouts.concurrency, grpo_target=GRPO_TARGET in backend.adapters, seed=cfg.seed,
            family_trials=ecfg.family_trials, family_trials_policies=ecfg.family_trials_policies, focus_family=ecfg.focus_family,
            on_policy_done=lambda name: sc.progress("evaluate", f"{name}: played and scored"), players=players,
            together=cfg.executor.kind == "local",  # on Ray each policy's player starts its own actors: one policy at a time
        )  # fmt: skip
    summary = {p.name: _metrics(p.metrics) for p in result.policies}
    return EvaluationDone(summary, Cost(policy_rollouts=sum(_played(p.metrics, families) for p in result.policies)))


def _metrics(m: dict[str, Any]) -> dict[str, Any]:
    """The evaluation service's metrics -> the few numbers the state keeps."""
    pr, mr = m.get("pass_rate") or {}, m.get("mean_reward") or {}
    return {"pass_rate": pr.get("value"), "ci_low": pr.get("low"), "ci_high": pr.get("high"), "mean_reward": mr.get("value"),
            "n": m.get("episodes") or m.get("n")}  # fmt: skip


def _played(metrics: dict[str, Any], families: dict[str, str]) -> int:
    """Episodes a policy actually played: its episodes less those it reused from the base (evaluation.reuse)."""
    per_family = metrics.get("trials_by_family") or {}
    reused = sum(per_family.get(families.get(t, ""), 0) for t in metrics.get("reused_base_tasks") or [])
    return int(metrics.get("episodes", 0)) - reused
