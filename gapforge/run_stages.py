"""The real stage services bound to the graph's `Stages` protocol (composition root).

Each method adapts one stage service of agents/, training/ or serving/ to the
graph's small result types, with the dependencies chosen here from the run's
config. A stage whose service is not in this installation raises
`StageUnavailable` (the graph records it; nothing is faked); a stage that cannot
produce a result from this run's data raises `StageFailed` with the reason.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from gapforge.config import GapforgeConfig
from graph.context import (
    CapabilityStats,
    Cost,
    DiscoveryDone,
    EvaluationDone,
    LabelPassDone,
    ReportDone,
    RolloutsDone,
    RouterDone,
    SelectionDone,
    StageFailed,
    StageUnavailable,
    SynthesisAttempt,
    TrainingDone,
    ValidationDone,
)

Progress = Callable[[str, str], None]  # (stage or "stage capability", one line)


def require(module: str, what: str) -> Any:
    """Import a stage's module, or say honestly that the stage is not in this installation."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise StageUnavailable(f"{what} ({module}) is not in this installation") from None
        raise


def data_errors() -> tuple[type[BaseException], ...]:
    """Errors meaning "this run's data cannot give a result" (recorded, not retried)."""
    found: list[type[BaseException]] = []
    for module, name in (("agents.analysis.errors", "AnalysisError"),):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def stop_orphans(spec: str) -> int:
    """Kill a training process for this job spec left running by a killed earlier run process
    (a resumed run must not train the same adapter twice at once). Linux /proc; returns how many."""
    import os
    import signal
    from pathlib import Path

    killed = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"training.run" in cmd and spec.encode() in cmd and int(proc.name) != os.getpid():
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


class RealStages:
    """Stage services for one run's config; owns what it opens (policy, sandbox pool) and closes it."""

    def __init__(self, cfg: GapforgeConfig, store: Any, progress: Progress | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.progress = progress or (lambda where, text: None)
        self._policy: Any = None
        self._pool: Any = None
        self._analyst: Any = None
        self._counter: Any = None
        self._train_gate = asyncio.Semaphore(1)

    # --- owned resources ---------------------------------------------------------------------
    def base_policy(self) -> Any:
        if self._policy is None:
            from gapforge.wiring import make_policy

            self._policy = make_policy(self.cfg.policy)
        return self._policy

    def sandbox_pool(self) -> Any:
        if self._pool is None:
            from sandbox.pool import SandboxPool

            if self.cfg.sandbox.backend == "docker":
                from sandbox.docker_backend import sweep

                sweep()  # containers left by a killed earlier process of this run (or any other)
            self._pool = SandboxPool(self.cfg.sandbox, size=self.cfg.sandbox.pool_size)
        return self._pool

    async def aclose(self) -> None:
        close = getattr(self._policy, "aclose", None)
        if close is not None:
            await close()
        if self._pool is not None:
            await asyncio.to_thread(self._pool.close)

    async def _data(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking service in a thread; its data errors become StageFailed."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except data_errors() as e:
            raise StageFailed(str(e).splitlines()[0]) from None

    # --- rollouts ------------------------------------------------------------------------------
    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        from agents.rollouts import CollectPlan, collect
        from gapforge.wiring import make_target_env_factory

        cfg = self.cfg
        env_name = cfg.rollouts.env
        probe, make_env = make_target_env_factory(cfg, env_name)
        tasks = list(cfg.rollouts.tasks or probe.task_ids())
        families = {t: probe.task_family(t) for t in tasks}
        probe.close()
        plan = CollectPlan(
            run_id=run_id,
            env=env_name,
            tasks=tasks,
            samples=cfg.rollouts.samples,
            concurrency=cfg.rollouts.concurrency,
            max_turns=cfg.rollouts.max_turns,
        )
        result = await collect(plan, make_env=make_env, policy=self.base_policy(), sink=self.store, families=families)
        episodes = await asyncio.to_thread(self.store.episodes, run_id, env_name)
        return RolloutsDone(len(episodes), sum(1 for e in episodes if e.success), result.ran, Cost(policy_rollouts=result.ran))

    # --- analysis ------------------------------------------------------------------------------
    def _analysis(self) -> tuple[Any, Any]:
        require("agents.analysis.service", "capability analysis")
        if self._analyst is None:
            from agents.analysis.compact import make_token_counter

            from gapforge.cli_analyze import analyst_model

            policy_tok = self.cfg.policy.local_path if self.cfg.policy.kind == "local" else None
            self._counter = make_token_counter(self.cfg.analysis.tokenizer, policy_tok)
            self._analyst = analyst_model(self.cfg, self.cfg.rollouts.env)
        return self._analyst, self._counter

    async def discover(self, run_id: str) -> DiscoveryDone:
        model, counter = self._analysis()
        from agents.analysis.discovery import discover
        from agents.analysis.split import ensure_split

        acfg = self.cfg.analysis
        await self._data(ensure_split, self.store, run_id, fraction=acfg.split_fraction, seed=acfg.seed)
        found = await self._data(discover, self.store, model, run_id, cfg=acfg, counter=counter)
        cost = Cost(0, 0, 0) if found.cached else Cost(found.calls, found.prompt_tokens, found.completion_tokens)
        return DiscoveryDone([c.name for c in found.capabilities], cost)

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone:
        model, counter = self._analysis()
        from agents.analysis.labeling import label_pass

        def progress(done: int, total: int) -> None:
            if done == total or done % max(1, total // 4) == 0:
                self.progress("label", f"pass {pass_index}: {done}/{total} episodes")

        try:
            res = await label_pass(self.store, model, run_id, pass_index, cfg=self.cfg.analysis, counter=counter, on_progress=progress)
        except data_errors() as e:
            raise StageFailed(str(e).splitlines()[0]) from None
        return LabelPassDone(pass_index, res.labeled, res.failed, Cost(res.calls, res.prompt_tokens, res.completion_tokens))

    async def select(self, run_id: str) -> SelectionDone:
        self._analysis()
        from agents.analysis.selection import select

        sel = await self._data(select, self.store, run_id, cfg=self.cfg.analysis)
        stats = {s.capability: CapabilityStats(s.gap, s.coverage, s.kept_passes, s.retained) for s in sel.statistics}
        return SelectionDone(list(sel.retained), stats)

    # --- synthesis (the service runs the generator + the self-test of one attempt) -----------
    async def synthesize(self, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
        service = require("agents.synthesis.service", "environment synthesis")
        from gapforge.wiring import make_synthesis_deps

        cfg = self.cfg.model_copy(deep=True)
        cfg.synthesis.max_attempts = attempt  # attempts 1..k-1 are stored: at most attempt k is new

        def say(cap: str, k: int, what: str) -> None:
            self.progress(f"synthesize {cap}", f"attempt {k}: {what}")

        deps = make_synthesis_deps(cfg, self.store, self.sandbox_pool(), say)
        result = await asyncio.to_thread(service.synthesize_capability, deps, run_id, capability)
        this = next((a for a in result.attempts if a.attempt == attempt), None)
        if this is None:
            return SynthesisAttempt(capability, attempt, None, result.reason or "no attempt made")
        llm_calls = 0 if this.resumed else 1 + (this.review is not None)
        return SynthesisAttempt(capability, attempt, this.synthetic_env_id, cost=Cost(llm_calls=llm_calls, policy_rollouts=this.rollouts))

    async def validate(self, run_id: str, capability: str, attempt: int) -> ValidationDone:
        """The verdict the synthesis service stored for this attempt (its self-test ran in the sandbox)."""
        require("agents.synthesis.service", "environment synthesis")
        rows = await asyncio.to_thread(self.store.synthetic_envs, run_id, capability)
        row = next((r for r in rows if r.attempt == attempt), None)
        stored = None if row is None else await asyncio.to_thread(self.store.get_validation, row.id)
        if stored is None:
            raise StageFailed(f"attempt {attempt} of {capability} has no stored verdict")
        verdict = stored.report.get("verdict") or {}
        failed = ", ".join(verdict.get("failed_checks") or [])
        line = "passed" if stored.passed else f"failed at {verdict.get('stage', '?')}" + (f": {failed}" if failed else "")
        return ValidationDone(capability, attempt, bool(stored.passed), line)

    # --- training, routing, evaluation, report ------------------------------------------------
    async def train(self, run_id: str, capability: str) -> TrainingDone:
        """GRPO + LoRA on the capability's accepted synthetic env, in its own process (training.run)."""
        require("training.service", "GRPO training")
        from training.envs import EnvSpec
        from training.run import run_jobs
        from training.service import TrainJob

        cfg = self.cfg
        module = cfg.workspace / "synthetic_envs" / run_id / f"{capability}.py"  # written by synthesis when accepted
        if not module.is_file():
            raise StageFailed(f"no accepted synthetic env module at {module}")
        if cfg.policy.kind != "local" or not cfg.policy.local_path:
            raise StageFailed("training needs a local base model: set policy.kind=local and policy.local_path")
        out = cfg.workspace / "adapters" / run_id / capability
        env = EnvSpec(kind="sandbox", module=str(module), sandbox=cfg.sandbox.model_dump(mode="json"))
        job = TrainJob(name=capability, capability=capability, base_model=cfg.policy.local_path, env=env, config=cfg.training,
                       out_dir=str(out), store_url=cfg.store_url, run_id=run_id)  # fmt: skip
        spec_dir = cfg.workspace / "train_jobs" / run_id

        def line(name: str, row: dict[str, Any]) -> None:
            if "step" in row and "reward" in row:
                self.progress(f"train {name}", ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))

        async with self._train_gate:  # one training process at a time (CPU/GPU memory)
            await asyncio.to_thread(stop_orphans, str(spec_dir / f"{capability}.json"))
            (outcome,) = await asyncio.to_thread(run_jobs, [job], spec_dir, line)
        res = outcome.result
        if res is None or res.status != "done":
            return TrainingDone(capability, None, False, error=outcome.error or "training failed")
        rollouts = res.steps * cfg.training.rollouts_per_step
        return TrainingDone(capability, capability, True, res.heldout_before, res.heldout_after,
                            cost=Cost(policy_rollouts=rollouts))  # fmt: skip

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone:
        require("agents.router", "the router")
        raise StageUnavailable("the router is installed but not wired into the graph yet")

    async def evaluate(self, run_id: str, capabilities: list[str]) -> EvaluationDone:
        require("evaluation", "evaluation")
        raise StageUnavailable("evaluation is installed but not wired into the graph yet")

    async def report(self, run_id: str) -> ReportDone:
        require("evaluation", "the report")
        raise StageUnavailable("the report is installed but not wired into the graph yet")


@asynccontextmanager
async def open_stages(cfg: GapforgeConfig, store: Any, progress: Progress | None = None) -> AsyncIterator[RealStages]:
    stages = RealStages(cfg, store, progress)
    try:
        yield stages
    finally:
        await stages.aclose()
