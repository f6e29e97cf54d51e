"""`collect_rollouts`: the base policy on the target's tasks (agents.rollouts.collect), every episode stored by this
process; with executor.kind ray the episodes are played on Ray actors (`gapforge.executor_wiring.episode_player`)."""

from __future__ import annotations

import asyncio

from gapforge.executor_wiring import episode_player
from gapforge.stages.common import StageContext
from gapforge.wiring import make_target_env_factory
from graph.context import Cost, RolloutsDone


async def collect_rollouts(sc: StageContext, run_id: str) -> RolloutsDone:
    from agents.errors import IncompleteStage
    from agents.rollouts import CollectPlan, CollectResult, collect

    cfg = sc.cfg
    env_name = cfg.rollouts.env
    probe, make_env = make_target_env_factory(cfg, env_name)
    tasks = list(cfg.rollouts.tasks or probe.task_ids())
    families = {t: probe.task_family(t) for t in tasks}
    probe.close()
    plan = CollectPlan(run_id=run_id, env=env_name, tasks=tasks, samples=cfg.rollouts.samples, concurrency=cfg.rollouts.concurrency,
                       max_turns=cfg.rollouts.max_turns)  # fmt: skip
    result = CollectResult(planned=0, skipped=0, ran=0)
    played = progress_every(sc, "collect_rollouts", "episodes")
    async with episode_player(cfg, cfg.policy, make_env) as player:  # None: played here (executor.kind local); else Ray actors
        await collect(plan, make_env=make_env, policy=sc.deps.base_policy() if player is None else None, sink=sc.store, families=families,
                      result=result, player=player,
                      on_episode=lambda _ep: played(result.skipped + result.ran + len(result.infra_failures) + result.stored_elsewhere,
                                                    result.planned))  # fmt: skip
    if not result.complete:  # analysis over a partial sample would be biased: stop, resumable (agents/infra.py's rule)
        counts = ", ".join(f"{k}={v}" for k, v in result.infra_counts().most_common())
        raise IncompleteStage(f"collect_rollouts: {len(result.infra_failures)} of {result.planned} episodes ended in infrastructure "
                              f"failures ({counts}) and were not stored; {result.ran} stored")
    episodes = await asyncio.to_thread(sc.store.episodes, run_id, env_name)
    return RolloutsDone(len(episodes), sum(1 for e in episodes if e.success), result.ran, Cost(policy_rollouts=result.ran))


def progress_every(sc: StageContext, where: str, unit: str, parts: int = 10):
    """A (done, total) callback that reports about `parts` lines over a stage (and its last one)."""

    def on_progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // parts) == 0:
            sc.progress(where, f"{done}/{total} {unit}")

    return on_progress
