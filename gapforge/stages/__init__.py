"""The real stage services bound to the graph's `Stages` protocol: one module per stage, each a thin
adapter from the protocol to its stage service (agents/, training/, evaluation/), all over one
`agents.deps.StageDeps` (every policy, pool and store lifetime) and one `store.workspace.Workspace`.

    rollouts.py  collect_rollouts            analysis.py    discover, label, select
    synthesis.py synthesize, validate        training.py    train, train_baseline
    routing.py   build_router (+ the routed models)   evaluation.py  evaluate   report.py  report

A stage whose service is not in this installation raises `StageUnavailable` (the graph records it;
nothing is faked); a stage that cannot produce a result from this run's data raises `StageFailed`.
Which stage set a run uses is a config value (`stages: real | fixtures`), stored with the run's config.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gapforge.config import GapforgeConfig
from gapforge.graph.context import (
    BaselineDone,
    DiscoveryDone,
    EvaluationDone,
    LabelPassDone,
    ReportDone,
    RolloutsDone,
    RouterDone,
    SelectionDone,
    SynthesisAttempt,
    TrainingDone,
    ValidationDone,
)
from gapforge.stages import evaluation, report, rollouts, synthesis, training
from gapforge.stages.analysis import Analysis
from gapforge.stages.common import Progress, StageContext
from gapforge.stages.routing import Routing


class RunStages:
    """`graph.context.Stages` for one run: each method hands its call to the stage's module."""

    def __init__(self, sc: StageContext) -> None:
        self.sc = sc
        self.analysis = Analysis(sc)
        self.routing = Routing(sc)

    @property
    def store(self) -> Any:
        return self.sc.store

    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        return await rollouts.collect_rollouts(self.sc, run_id)

    async def discover(self, run_id: str) -> DiscoveryDone:
        return await self.analysis.discover(run_id)

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone:
        return await self.analysis.label(run_id, pass_index)

    async def select(self, run_id: str) -> SelectionDone:
        return await self.analysis.select(run_id)

    async def synthesize(self, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
        return await synthesis.synthesize(self.sc, run_id, capability, attempt)

    async def validate(self, run_id: str, capability: str, attempt: int) -> ValidationDone:
        return await synthesis.validate(self.sc, run_id, capability, attempt)

    async def train(self, run_id: str, capability: str, *, module: str | None = None) -> TrainingDone:
        return await training.train(self.sc, run_id, capability, module=module)

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone:
        return await self.routing.build_router(run_id, capabilities)

    async def train_baseline(self, run_id: str) -> BaselineDone:
        done = await training.train_baseline(self.sc, run_id)
        if done.cost.policy_rollouts:  # trained now: the evaluation loads the routed models again, with it
            await self.routing.aclose()
        return done

    async def evaluate(
        self, run_id: str, capabilities: list[str], *, env: str | None = None, tasks: list[str] | None = None
    ) -> EvaluationDone:
        return await evaluation.evaluate(self.sc, self.routing, run_id, capabilities, env=env, tasks=tasks)

    async def report(self, run_id: str, *, out: str | None = None) -> ReportDone:
        return await report.report(self.sc, run_id, out=out)

    async def aclose(self) -> None:
        await self.routing.aclose()


def stage_context(
    cfg: GapforgeConfig, store: Any, progress: Progress | None = None, *, pool_size: int | None = None
) -> StageContext:
    """One run's StageContext: one StageDeps (built from `cfg`) sharing the caller's store."""
    from gapforge.wiring import build_deps

    deps = dataclasses.replace(build_deps(cfg, pool_size=pool_size), open_store=lambda: store)
    return StageContext(cfg, deps, progress or (lambda where, text: None))


@asynccontextmanager
async def open_stages(
    cfg: GapforgeConfig,
    store: Any,
    progress: Progress | None = None,
    *,
    stages_cls: type[RunStages] = RunStages,
    pool_size: int | None = None,
) -> AsyncIterator[RunStages]:
    """The real stage services of a run over one StageDeps sharing the caller's store (the caller closes the store;
    the deps close every policy and the sandbox pool they made). The graph's run and every standalone command
    (`gapforge analyze / synthesize / train / evaluate / report`) open them here and call the same methods."""
    stages = stages_cls(stage_context(cfg, store, progress, pool_size=pool_size))
    deps = stages.sc.deps
    try:
        yield stages
    finally:
        try:
            await stages.aclose()
        finally:
            await deps.aclose_policies()
            await deps.aclose_pool()
            close_checks = getattr(
                deps.sandbox_checks, "close", None
            )  # local readiness worker processes, if any started
            if close_checks is not None:
                await asyncio.to_thread(close_checks)
