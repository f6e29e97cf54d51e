"""`evaluate`: base vs TRACE (routed) vs each adapter vs the baselines on the held-out split (evaluation.service),
with every comparison on in the config plugged in (evaluation.registry: GEPA's prompt optimised first, more
evaluations after: every task greedy, the rollout-scaling curve), then, with `evaluation.unseen_env`, the same policies
on the second held-out split: every task of that target, records the analysis never saw (rows `unseen:<policy>`)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from gapforge.evaluation.summary import UNSEEN
from gapforge.executor_wiring import evaluation_players
from gapforge.graph.context import Cost, EvaluationDone, StageFailed
from gapforge.wiring import make_target_env_factory

if TYPE_CHECKING:
    from gapforge.stages import RunStages


async def evaluate(
    sc: RunStages,
    run_id: str,
    capabilities: list[str],
    *,
    env: str | None = None,
    tasks: list[str] | None = None,
) -> EvaluationDone:
    """The held-out split the analysis stored with the run (its env and tasks), unless `env` / `tasks` name others
    (`gapforge evaluate --env / --tasks`)."""
    from gapforge.evaluation import reuse
    from gapforge.evaluation.comparisons import Evaluation
    from gapforge.evaluation.registry import enabled
    from gapforge.evaluation.service import load_backend

    cfg, ecfg = sc.cfg, sc.cfg.evaluation
    split = await asyncio.to_thread(sc.store.get_split, run_id)
    if split is None and tasks is None:
        raise StageFailed("no held-out split stored with the run (the collection stores it)")
    env_name = env or (split.env if split is not None else cfg.rollouts.env)
    artifacts, backend, router = await asyncio.to_thread(sc.routing.routed, run_id)
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
    ev = Evaluation(
        sc.store,
        run_id,
        cfg,
        env_name,
        make_env,
        tasks,
        families,
        split,
        artifacts,
        backend,
        router,
        sc.base_dir(),
        given=env is not None or given,
        progress=lambda line: sc.progress("evaluate", line),
        play=partial(_play, sc, run_id, env_name, make_env, router),
        failure=StageFailed,
        load_backend=load_backend,
    )
    comparisons = enabled(cfg)
    prepared = {c.name: await c.prepare(ev) for c in comparisons}  # e.g. GEPA optimises its prompt
    result = await ev.play(
        run_id,
        artifacts=artifacts,
        backend=backend,
        tasks=tasks,
        families=families,
        prepared={n: p for n, p in prepared.items() if p is not None},
        on_policy_done=lambda name: sc.progress("evaluate", f"{name}: played and scored"),
        **_settings(cfg),
    )
    played = sum(reuse.played(p.metrics) for p in result.policies)
    evaluated = list(result.policies)  # whose episodes' user-simulator tokens the stage's cost counts
    for c in sorted(comparisons, key=lambda c: c.extend_order):  # more evaluations: every task greedy, then the curve
        played += await c.extend(ev)
    summary = {p.name: _metrics(p.metrics) for p in result.policies}
    if ecfg.unseen_env and not ev.given:  # the second held-out split: records the analysis never saw
        prepared_now = {n: p for n, p in prepared.items() if p is not None}
        unseen = await _unseen(sc, run_id, split, artifacts, backend, router, prepared_now)
        played += sum(reuse.played(p.metrics) for p in unseen.policies)
        evaluated += unseen.policies
        summary |= {f"{UNSEEN}:{p.name}": _metrics(p.metrics) for p in unseen.policies}
    if cfg.training.report_to:  # the summary beside the adapters' training curves (evaluation.tracking)
        from gapforge.evaluation.tracking import log_evaluation

        where = sc.deps.workspace.tracking_dir(run_id, "evaluation")
        for problem in await asyncio.to_thread(log_evaluation, cfg.training.report_to, sc.store, run_id, where):
            sc.progress("evaluate", f"warning: {problem}")
    prompt, completion = await asyncio.to_thread(_user_tokens, sc.store, evaluated)
    cost = Cost(
        policy_rollouts=played + ev.policy_rollouts,
        llm_calls=ev.llm_calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )
    return EvaluationDone(summary, cost)


def _user_tokens(store: Any, policies: list[Any]) -> tuple[int, int]:
    """An LLM user simulator's tokens over the policies' evaluated episodes (Score.info `user_tokens`), less the
    episodes a routed policy copied (a copy keeps its source's policy name: counted with the source's). All of them:
    the node records its cost once, when the stage completes, so a stage resumed after a crash counts what it had
    played before too."""
    from gapforge.envs.protocol import user_tokens

    prompt = completion = 0
    for p in policies:
        rows = store.episodes(p.metrics["child_run"], env=p.metrics.get("env"))
        more = user_tokens(r.score_info for r in rows if r.policy == p.policy)
        prompt, completion = prompt + more[0], completion + more[1]
    return prompt, completion


def _settings(cfg: Any) -> dict[str, Any]:
    """The evaluation settings both held-out splits are played with."""
    ecfg = cfg.evaluation
    return {
        "trials": ecfg.trials,
        "temperature": cfg.policy.temperature,
        "family_trials": ecfg.family_trials,
        "family_trials_policies": ecfg.family_trials_policies,
        "focus_family": ecfg.focus_family,
        "min_family_episodes": ecfg.min_family_episodes,
    }


async def _unseen(
    sc: RunStages, run_id: str, split: Any, artifacts: Any, backend: Any, router: Any, prepared: dict[str, Any]
) -> Any:
    """Every policy of the held-out evaluation on every task of `evaluation.unseen_env`, with its settings (trials,
    family trials, focus family), stored as `unseen:<policy>`; returns evaluate_run's result."""
    cfg, ecfg = sc.cfg, sc.cfg.evaluation
    env_name = ecfg.unseen_env or ""
    probe, make_env = make_target_env_factory(cfg, env_name)
    try:
        tasks = probe.task_ids()
        families = {t: probe.task_family(t) for t in tasks}
    finally:
        probe.close()
    seen = {*split.analysis_tasks, *split.heldout_tasks} if split is not None else set()
    shared = sorted(seen & set(tasks))
    if shared:  # preflight refuses it; a config changed on resume gets here
        raise StageFailed(
            f"evaluation.unseen_env '{env_name}' shares {len(shared)} task id(s) with the run's split "
            f"({', '.join(shared[:3])}): name tasks the run never played"
        )
    sc.progress("evaluate", f"unseen records: {len(tasks)} tasks of {env_name}")
    result = await _play(
        sc,
        run_id,
        env_name,
        make_env,
        router,
        run_id,
        artifacts=artifacts,
        backend=backend,
        tasks=tasks,
        families=families,
        prepared=prepared,
        on_policy_done=lambda name: sc.progress("evaluate", f"unseen records: {name}: played and scored"),
        scope=UNSEEN,
        **_settings(cfg),
    )
    return result


async def _play(
    sc: RunStages,
    main_run: str,
    env_name: str,
    make_env: Any,
    router: Any,
    run_id: str,
    *,
    artifacts: Any,
    backend: Any,
    baseline_path: Any = None,
    **kwargs: Any,
) -> Any:
    """evaluation.service.evaluate_run of `run_id` (the run's, or a curve point's) under the run's players (worker
    processes or Ray actors; None: every policy plays here)."""
    from gapforge.evaluation.service import evaluate_run

    cfg = sc.cfg
    async with evaluation_players(
        cfg, sc.store, main_run, sc.base_dir(), artifacts, make_env, baseline_path=baseline_path
    ) as players:
        return await evaluate_run(
            sc.store,
            run_id,
            backend=backend,
            router=router,
            artifacts=artifacts,
            env=env_name,
            make_env=make_env,
            max_turns=cfg.rollouts.max_turns,
            concurrency=cfg.rollouts.concurrency,
            seed=cfg.seed,
            players=players,
            together=cfg.executor.kind == "local",  # on Ray each policy's player starts its own actors: one at a time
            **kwargs,
        )


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
