"""`evaluate`: base vs TRACE (routed) vs each adapter vs the baselines on the held-out split (evaluation.service); with
`evaluation.all_tasks_greedy` also on every task of the run, greedy, 1 trial (the paper's protocol, rows `all_tasks:<policy>`)."""

from __future__ import annotations

import asyncio
from typing import Any

from gapforge.executor_wiring import evaluation_players
from gapforge.graph.context import Cost, EvaluationDone, StageFailed
from gapforge.stages.common import StageContext, require
from gapforge.stages.routing import Routing
from gapforge.wiring import make_target_env_factory


async def evaluate(
    sc: StageContext,
    routing: Routing,
    run_id: str,
    capabilities: list[str],
    *,
    env: str | None = None,
    tasks: list[str] | None = None,
) -> EvaluationDone:
    """The held-out split the analysis stored with the run (its env and tasks), unless `env` / `tasks` name others
    (`gapforge evaluate --env / --tasks`)."""
    require("gapforge.evaluation.service", "evaluation")
    from gapforge.evaluation.policies import GRPO_TARGET
    from gapforge.evaluation.service import evaluate_run

    cfg, ecfg = sc.cfg, sc.cfg.evaluation
    split = await asyncio.to_thread(sc.store.get_split, run_id)
    if split is None and tasks is None:
        raise StageFailed("no held-out split stored with the run (the analysis stores it)")
    env_name = env or (split.env if split is not None else cfg.rollouts.env)
    artifacts, backend, router = await asyncio.to_thread(routing.routed, run_id)
    probe, make_env = make_target_env_factory(cfg, env_name)
    given = tasks is not None
    try:
        tasks = list(split.heldout_tasks) if tasks is None else list(tasks)  # type: ignore[union-attr]
        unknown = sorted(set(tasks) - set(probe.task_ids()))
        if unknown:
            raise StageFailed(
                f"unknown task id(s) {', '.join(unknown)} in {env_name}: list them with `gapforge rollouts tasks {env_name}`"
            )
        families = {t: probe.task_family(t) for t in tasks}
    finally:
        probe.close()
    gepa, gepa_cost = (
        await _gepa(sc, run_id, split, env_name, artifacts, backend, make_env) if ecfg.baseline_gepa else (None, Cost())
    )
    async with evaluation_players(
        cfg, sc.store, run_id, sc.base_dir(), artifacts, make_env, router
    ) as players:  # None: every policy plays here
        result = await evaluate_run(
            sc.store,
            run_id,
            backend=backend,
            router=router,
            artifacts=artifacts,
            env=env_name,
            make_env=make_env,
            tasks=tasks,
            families=families,
            trials=ecfg.trials,
            max_turns=cfg.rollouts.max_turns,
            temperature=cfg.policy.temperature,
            concurrency=cfg.rollouts.concurrency,
            grpo_target=GRPO_TARGET in backend.adapters,
            gepa=gepa,
            seed=cfg.seed,
            family_trials=ecfg.family_trials,
            family_trials_policies=ecfg.family_trials_policies,
            focus_family=ecfg.focus_family,
            min_family_episodes=ecfg.min_family_episodes,
            on_policy_done=lambda name: sc.progress("evaluate", f"{name}: played and scored"),
            players=players,
            together=cfg.executor.kind
            == "local",  # on Ray each policy's player starts its own actors: one policy at a time
        )
    played = sum(_played(p.metrics, families) for p in result.policies)
    if ecfg.all_tasks_greedy:  # the paper's protocol beside the held-out split: every task of the run, greedy, 1 trial
        every = (
            sorted({*split.analysis_tasks, *split.heldout_tasks})
            if split is not None and env is None and not given
            else tasks
        )
        played += await _all_tasks_greedy(sc, run_id, env_name, every, make_env, artifacts, backend, router)
    if (
        ecfg.scaling_curve
    ):  # pass rate against training rollouts: every kept fraction of the adapters' and the baseline's training
        from gapforge.stages.scaling import evaluate_scaling

        played += await evaluate_scaling(
            sc, routing, run_id, env=env_name, make_env=make_env, tasks=tasks, families=families
        )
    summary = {p.name: _metrics(p.metrics) for p in result.policies}
    return EvaluationDone(
        summary, Cost(policy_rollouts=played + gepa_cost.policy_rollouts, llm_calls=gepa_cost.llm_calls)
    )


async def _all_tasks_greedy(
    sc: StageContext,
    run_id: str,
    env_name: str,
    tasks: list[str],
    make_env: Any,
    artifacts: Any,
    backend: Any,
    router: Any,
) -> int:
    """Every policy on `tasks` at temperature 0, 1 trial each, stored as `all_tasks:<policy>` (evaluation.service, scope);
    returns the episodes played."""
    from gapforge.evaluation.policies import GRPO_TARGET
    from gapforge.evaluation.service import evaluate_run

    cfg = sc.cfg
    probe = make_env()
    try:
        families = {t: probe.task_family(t) for t in tasks}
    finally:
        probe.close()
    async with evaluation_players(cfg, sc.store, run_id, sc.base_dir(), artifacts, make_env, router) as players:
        result = await evaluate_run(
            sc.store,
            run_id,
            backend=backend,
            router=router,
            artifacts=artifacts,
            env=env_name,
            make_env=make_env,
            tasks=tasks,
            families=families,
            trials=1,
            max_turns=cfg.rollouts.max_turns,
            temperature=0.0,
            concurrency=cfg.rollouts.concurrency,
            grpo_target=GRPO_TARGET in backend.adapters,
            seed=cfg.seed,
            family_trials_policies=(),
            on_policy_done=lambda name: sc.progress("evaluate", f"all tasks, greedy: {name}: played and scored"),
            players=players,
            together=cfg.executor.kind == "local",
            scope="all_tasks",
        )
    return sum(_played(p.metrics, families) for p in result.policies)


async def _gepa(
    sc: StageContext, run_id: str, split: Any, env_name: str, artifacts: Any, backend: Any, make_env: Any
) -> tuple[Any, Cost]:
    """(GEPA's optimised system prompt (evaluation.gepa_baseline): the run's stored one, else optimised on its analysis split;
    what this call spent on it: `gepa_cost`)."""
    from gapforge.evaluation.gepa_baseline import gepa_for_run, load_gepa

    if split is None or split.env != env_name:
        raise StageFailed(
            f"evaluation.baseline_gepa optimises on the run's analysis split, and {env_name} has none stored: "
            "evaluate the run's own env or set evaluation.baseline_gepa=false"
        )
    base = backend.policy(None, temperature=sc.cfg.policy.temperature, name="base")
    stored = load_gepa(sc.store, run_id)
    record = await gepa_for_run(
        sc.store,
        run_id,
        sc.cfg,
        base=base,
        make_env=make_env,
        split=split,
        capabilities=artifacts.capabilities,
        n_adapters=len(artifacts.adapter_paths),
    )
    sc.progress(
        "evaluate",
        f"gepa: {record.metric_calls} of {record.max_metric_calls} metric calls, analysis-split reward "
        f"{record.seed_score:.2f} -> {record.best_score:.2f}",
    )
    return record, gepa_cost(stored, record)


def gepa_cost(stored: Any, record: Any) -> Cost:
    """What GEPA spent in this stage: its metric calls (episodes of the policy) and reflection calls (the `llm` role) when
    it optimised now; nothing when the run's stored prompt was reused (`stored` equals `record`: spent by an earlier call)."""
    if stored is not None and stored.model_dump() == record.model_dump():
        return Cost()
    return Cost(policy_rollouts=record.metric_calls, llm_calls=record.reflection_calls)


def _metrics(m: dict[str, Any]) -> dict[str, Any]:
    """The evaluation service's metrics -> the few numbers the state keeps."""
    pr, mr = m.get("pass_rate") or {}, m.get("mean_reward") or {}
    return {
        "pass_rate": pr.get("value"),
        "ci_low": pr.get("low"),
        "ci_high": pr.get("high"),
        "mean_reward": mr.get("value"),
        "n": m.get("episodes") or m.get("n"),
    }


def _played(metrics: dict[str, Any], families: dict[str, str]) -> int:
    """Episodes a policy actually played: its episodes less those it reused from the base (evaluation.reuse)."""
    per_family = metrics.get("trials_by_family") or {}
    reused = sum(per_family.get(families.get(t, ""), 0) for t in metrics.get("reused_base_tasks") or [])
    return int(metrics.get("episodes", 0)) - reused
