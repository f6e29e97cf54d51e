"""The real stage services bound to the graph's `Stages` protocol (composition root).

Each method adapts one stage service of agents/, training/ or serving/ to the
graph's small result types. A stage whose service is not in this installation
raises `StageUnavailable` — the graph records that, it never fakes a result.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gapforge.config import GapforgeConfig
from graph.context import (
    Cost,
    DiscoveryDone,
    EvaluationDone,
    LabelPassDone,
    ReportDone,
    RolloutsDone,
    RouterDone,
    RunRef,
    SelectionDone,
    StageUnavailable,
    SynthesisAttempt,
    TrainingDone,
    ValidationDone,
)


class RealStages:
    """Stage services for one run's config; owns the policy it creates and closes it."""

    def __init__(self, cfg: GapforgeConfig, store: Any) -> None:
        self.cfg = cfg
        self.store = store
        self._policy: Any = None

    def _base_policy(self) -> Any:
        if self._policy is None:
            from gapforge.wiring import make_policy

            self._policy = make_policy(self.cfg.policy)
        return self._policy

    async def aclose(self) -> None:
        close = getattr(self._policy, "aclose", None)
        if close is not None:
            await close()

    async def collect_rollouts(self, run: RunRef) -> RolloutsDone:
        from agents.rollouts import CollectPlan, collect
        from gapforge.wiring import make_target_env_factory

        cfg = self.cfg
        env_name = cfg.rollouts.env
        probe, make_env = make_target_env_factory(cfg, env_name)
        tasks = list(cfg.rollouts.tasks or probe.task_ids())
        families = {t: probe.task_family(t) for t in tasks}
        probe.close()
        plan = CollectPlan(
            run_id=run.run_id,
            env=env_name,
            tasks=tasks,
            samples=cfg.rollouts.samples,
            concurrency=cfg.rollouts.concurrency,
            max_turns=cfg.rollouts.max_turns,
        )
        result = await collect(plan, make_env=make_env, policy=self._base_policy(), sink=self.store, families=families)
        episodes = await asyncio.to_thread(self.store.episodes, run.run_id, env_name)
        return RolloutsDone(
            episodes=len(episodes),
            successes=sum(1 for e in episodes if e.success),
            ran=result.ran,
            cost=Cost(policy_rollouts=result.ran),
        )

    async def discover(self, run: RunRef) -> DiscoveryDone:
        raise StageUnavailable("capability discovery (issue 9) is not on this branch yet")

    async def label(self, run: RunRef, pass_index: int) -> LabelPassDone:
        raise StageUnavailable("capability labeling (issue 9) is not on this branch yet")

    async def select(self, run: RunRef) -> SelectionDone:
        raise StageUnavailable("capability selection (issue 9) is not on this branch yet")

    async def synthesize(self, run: RunRef, capability: str, attempt: int) -> SynthesisAttempt:
        raise StageUnavailable("environment synthesis (issue 10) is not on this branch yet")

    async def validate(self, run: RunRef, capability: str, attempt: int) -> ValidationDone:
        raise StageUnavailable("synthetic env validation loop (issue 10) is not on this branch yet")

    async def train(self, run: RunRef, capability: str) -> TrainingDone:
        raise StageUnavailable("GRPO training (issue 11) is not on this branch yet")

    async def build_router(self, run: RunRef, capabilities: list[str]) -> RouterDone:
        raise StageUnavailable("the router (issue 12) is not on this branch yet")

    async def evaluate(self, run: RunRef, capabilities: list[str]) -> EvaluationDone:
        raise StageUnavailable("evaluation (issue 12) is not on this branch yet")

    async def report(self, run: RunRef) -> ReportDone:
        raise StageUnavailable("the report (issue 12) is not on this branch yet")


@asynccontextmanager
async def open_stages(cfg: GapforgeConfig, store: Any) -> AsyncIterator[RealStages]:
    stages = RealStages(cfg, store)
    try:
        yield stages
    finally:
        await stages.aclose()
