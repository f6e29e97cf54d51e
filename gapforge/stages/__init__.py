"""The real stages of a run: `RunStages` implements the graph's `Stages` protocol (graph/context.py). Each stage is
one function in its stage's module, taking the run's `RunStages` first, assigned here as a method:

    rollouts.py  collect_rollouts            analysis.py    discover, label, select
    synthesis.py synthesize, validate        training.py    train, train_baseline
    routing.py   build_router (+ the routed models)   evaluation.py  evaluate   report.py  report

They share one `RunStages`: the run's config, one `agents.deps.StageDeps` (every policy, pool and store lifetime),
the progress callback, the training slots and the models made once per run. A stage that cannot produce a result
from this run's data raises `StageFailed`. Which stage set a run uses is a config value (`stages: real |
fixtures`), stored with the run's config. The graph's run and every standalone command (`gapforge analyze /
synthesize / train / evaluate / report`) open them with `open_stages` and call the same methods.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gapforge.agents.deps import StageDeps
from gapforge.config import GapforgeConfig
from gapforge.graph.context import StageFailed
from gapforge.stages import analysis, evaluation, report, rollouts, routing, synthesis, training
from gapforge.stages.common import Progress, training_slots
from gapforge.stages.cores import DriverCores

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(eq=False)
class RunStages:
    """One run's stages over its config and deps; `deps` owns every policy, pool and store lifetime."""

    cfg: GapforgeConfig
    deps: StageDeps
    progress: Progress = lambda where, text: None
    analysis_env: str | None = None  # whose analyst (default rollouts.env; `gapforge analyze`: the run's episodes')
    analyst: tuple[Any, Any] | None = field(default=None, init=False, repr=False)  # (chat model, token counter)

    collect_rollouts = rollouts.collect_rollouts
    discover = analysis.discover
    label = analysis.label
    select = analysis.select
    synthesize = synthesis.synthesize
    validate = synthesis.validate
    train = training.train
    build_router = routing.build_router
    train_baseline = training.train_baseline
    evaluate = evaluation.evaluate
    report = report.report

    @cached_property
    def routing(self) -> routing.Routing:
        """The run's routed models (the evaluation plays them, `gapforge serve` serves them)."""
        return routing.Routing(self)

    @cached_property
    def _training(self) -> tuple[asyncio.Semaphore, int | None]:
        """Computed when the first training job asks (it may import torch to look for CUDA), not at start-up."""
        slots, threads = training_slots(self.cfg)
        return asyncio.Semaphore(slots), threads

    @property
    def train_gate(self) -> asyncio.Semaphore:
        """training_slots: jobs at once here; on Ray the cluster's resources gate."""
        return self._training[0]

    @property
    def train_threads(self) -> int | None:
        """Torch threads per training process when jobs share a CPU (None: the job's own choice)."""
        return self._training[1]

    @cached_property
    def driver_cores(self) -> DriverCores:
        return DriverCores()

    @property
    def store(self) -> Store:
        return self.deps.store

    def base_dir(self) -> str:
        """The base model's weights on this machine: what training loads, and (policy.kind=endpoint) what vLLM serves."""
        path = self.cfg.policy.local_path
        if self.cfg.policy.kind not in ("local", "endpoint") or not path:
            raise StageFailed(
                "training, routing and evaluation need the base model's weights on this machine: set policy.local_path "
                "(with policy.kind=endpoint: the directory the vLLM server serves)"
            )
        return path

    async def aclose(self) -> None:
        """Close the routed models, every policy and the sandbox pool the deps made (not the caller's store)."""
        try:
            await self.routing.aclose()
        finally:
            await self.deps.aclose(store=False)


def stage_context(
    cfg: GapforgeConfig,
    store: Store,
    progress: Progress | None = None,
    *,
    pool_size: int | None = None,
    stages_cls: type[RunStages] = RunStages,
) -> RunStages:
    """One run's stages: one StageDeps (built from `cfg`) sharing the caller's store."""
    from gapforge.wiring import build_deps

    deps = dataclasses.replace(build_deps(cfg, pool_size=pool_size), open_store=lambda: store)
    return stages_cls(cfg, deps, progress or (lambda where, text: None))


@asynccontextmanager
async def open_stages(
    cfg: GapforgeConfig,
    store: Store,
    progress: Progress | None = None,
    *,
    stages_cls: type[RunStages] = RunStages,
    pool_size: int | None = None,
) -> AsyncIterator[RunStages]:
    """The run's stages over one StageDeps sharing the caller's store (the caller closes the store; `aclose` closes
    every policy and the sandbox pool the deps made). From here on the caller's main thread runs torch on 1 thread
    and local decoding on the generator lanes (serving.batching.lanes_only)."""
    from gapforge.serving.batching import lanes_only

    lanes_only()
    stages = stage_context(cfg, store, progress, pool_size=pool_size, stages_cls=stages_cls)
    try:
        yield stages
    finally:
        await stages.aclose()
