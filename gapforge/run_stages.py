"""The real stage services bound to the graph's `Stages` protocol (composition root).

Each method adapts one stage service of agents/, training/ or serving/ to the
graph's small result types, with the dependencies chosen here from the run's
config. A stage whose service is not in this installation raises
`StageUnavailable` (the graph records it; nothing is faked); a stage that cannot
produce a result from this run's data raises `StageFailed` with the reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
    """Stage services for one run's config over the typed dependencies (`agents.deps.StageDeps`:
    store, sandbox pool, policy and chat-model factories); whoever opens it closes the deps."""

    def __init__(self, cfg: GapforgeConfig, deps: Any, progress: Progress | None = None) -> None:
        self.cfg = cfg
        self.deps = deps
        self.store = deps.store
        self.progress = progress or (lambda where, text: None)
        self._policy: Any = None
        self._analyst: Any = None
        self._counter: Any = None
        self._train_gate = asyncio.Semaphore(1 if cfg.executor.kind == "local" else 1024)  # on Ray the cluster's GPUs gate
        self._router: Any = None

    # --- owned resources ---------------------------------------------------------------------
    def base_policy(self) -> Any:
        if self._policy is None:
            self._policy = self.deps.make_policy()
        return self._policy

    def sandbox_pool(self) -> Any:
        """The warm pool (opened on first use; it sweeps containers left by killed processes)."""
        return self.deps.sandbox_pool

    async def _data(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking service in a thread; its data errors become StageFailed."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except data_errors() as e:
            raise StageFailed(str(e).splitlines()[0]) from None

    # --- rollouts ------------------------------------------------------------------------------
    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        from agents.rollouts import CollectPlan, collect
        from gapforge.wiring import episode_player, make_target_env_factory

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
        async with episode_player(cfg, cfg.policy, make_env) as player:  # None: played here (executor.kind local)
            result = await collect(plan, make_env=make_env, policy=self.base_policy() if player is None else None, sink=self.store,
                                   families=families, player=player)
        if not result.complete:  # analysis over a partial sample would be biased: stop, resumable (agents/infra.py's rule)
            from agents.errors import IncompleteStage

            counts = ", ".join(f"{k}={v}" for k, v in result.infra_counts().most_common())
            raise IncompleteStage(f"collect_rollouts: {len(result.infra_failures)} of {result.planned} episodes ended in infrastructure "
                                  f"failures ({counts}) and were not stored; {result.ran} stored")
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
            if not what.startswith("check "):  # one line per attempt step, not per self-test check
                self.progress(f"synthesize {cap}", f"attempt {k}: {what}")

        deps = make_synthesis_deps(cfg, self.store, self.sandbox_pool() if cfg.executor.kind == "local" else None, say)
        try:  # readiness rollouts on this loop, so an endpoint policy's HTTP session is closed on it
            result = await service.asynthesize_capability(deps, run_id, capability)
        finally:
            if deps.policy is not None and hasattr(deps.policy, "aclose"):
                await deps.policy.aclose()
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
        from gapforge.wiring import job_runner
        from training.envs import EnvSpec
        from training.service import TrainJob

        cfg = self.cfg
        module = cfg.workspace / "synthetic_envs" / run_id / f"{capability}.py"  # written by synthesis when accepted
        if not module.is_file():
            raise StageFailed(f"no accepted synthetic env module at {module}")
        out = cfg.workspace / "adapters" / run_id / capability
        env = EnvSpec(kind="sandbox", module=str(module), sandbox=cfg.sandbox.model_dump(mode="json"))
        job = TrainJob(name=capability, capability=capability, base_model=self._base_dir(), env=env, config=cfg.training,
                       out_dir=str(out), store_url=cfg.store_url, run_id=run_id)  # fmt: skip
        spec_dir = cfg.workspace / "train_jobs" / run_id

        async with self._train_gate:  # one training process at a time (CPU/GPU memory)
            await asyncio.to_thread(stop_orphans, str(spec_dir / f"{capability}.json"))
            self.progress(f"train {capability}", f"GRPO in its own process (log: {out}/steps.jsonl)")
            (outcome,) = await asyncio.to_thread(job_runner(cfg), [job], spec_dir, self._train_step_line)
        res = outcome.result
        if res is None or res.status != "done":
            return TrainingDone(capability, None, False, error=outcome.error or "training failed")
        rollouts = res.steps * cfg.training.rollouts_per_step
        return TrainingDone(capability, capability, True, res.heldout_before, res.heldout_after, kept_step=res.best_step,
                            cost=Cost(policy_rollouts=rollouts))  # fmt: skip

    def _train_step_line(self, name: str, event: dict[str, Any]) -> None:
        """One progress line per GRPO step of a training process (its JSON step events)."""
        if event.get("event") == "step":
            self.progress(f"train {name}", f"step {event.get('step')}/{event.get('max_steps')} reward {event.get('reward', 0):.3f} "
                                           f"informative {event.get('informative_share', 0):.2f}")

    def _routed(self, run_id: str) -> tuple[Any, Any, Any]:
        """(artifacts, backend, router) of the run: base weights loaded once, every trained adapter on them."""
        if self._router is None or self._router[0].run_id != run_id:
            from evaluation.policies import GRPO_TARGET
            from evaluation.service import build_router, load_backend, run_artifacts

            base = self._base_dir()
            artifacts = run_artifacts(self.store, run_id, max_example_chars=self.cfg.routing.max_example_chars)
            baseline = self.store.get_adapter(run_id, GRPO_TARGET)
            extra = {GRPO_TARGET: baseline.path} if baseline is not None and baseline.status == "done" and baseline.path else {}
            routing = self.cfg.routing
            if self.cfg.policy.kind == "endpoint":  # the served policy (vLLM): adapters loaded into it at run time
                backend = self._vllm_backend({**artifacts.adapter_paths, **extra})
                routing = self._endpoint_routing()
            else:
                backend = load_backend(base, artifacts, extra_adapters=extra, max_new_tokens=self.cfg.policy.max_new_tokens, seed=self.cfg.seed)
            openings = self._openings(run_id, artifacts) if routing.backend == "openings" else None
            key = self.cfg.policy.endpoint.api_key
            router = build_router(artifacts, routing=routing, backend=backend, tokenizer_path=base, openings=openings,
                                  api_key=key.get_secret_value() if key else None)
            self._router = (artifacts, backend, router)
        return self._router

    def _openings(self, run_id: str, artifacts: Any) -> dict[str, list[str]]:
        """Each capability's synthetic-env openings on its TRAINING seeds (what its adapter was trained on), in the sandbox;
        the router's accuracy is measured on held-out seeds."""
        from evaluation.routing import env_openings
        from sandbox.env import open_env

        ws, sandbox, pool = self.cfg.workspace, self.cfg.sandbox, self.sandbox_pool()
        seeds = list(range(self.cfg.training.train_seeds))
        return {c["name"]: env_openings(lambda m=ws / "synthetic_envs" / run_id / f"{c['name']}.py": open_env(m, sandbox, pool), seeds)
                for c in artifacts.capabilities}

    def _base_dir(self) -> str:
        """The base model's weights on this machine: what training loads, and (policy.kind=endpoint) what vLLM serves."""
        path = self.cfg.policy.local_path
        if self.cfg.policy.kind not in ("local", "endpoint") or not path:
            raise StageFailed("training, routing and evaluation need the base model's weights on this machine: set policy.local_path "
                              "(with policy.kind=endpoint: the directory the vLLM server serves)")
        return path

    def _vllm_backend(self, adapters: dict[str, Any]) -> Any:
        """The policy endpoint (a vLLM server) with every adapter registered under its versioned name."""
        from serving.vllm_backend import VLLMBackend

        ep = self.cfg.policy.endpoint
        backend = VLLMBackend(ep.base_url or "http://localhost:8000/v1", ep.model, adapters, api_key=ep.api_key.get_secret_value() if ep.api_key else None,
                              timeout_s=ep.timeout_s, max_retries=ep.max_retries, max_new_tokens=self.cfg.policy.max_new_tokens)
        asyncio.run(backend.ensure_registered())  # (called in a worker thread: no running loop here)
        return backend

    def _endpoint_routing(self) -> Any:
        """Routing for a served policy: the same vLLM server's completions (routing.vllm_* default to the policy endpoint)."""
        routing = self.cfg.routing
        if routing.backend == "transformers":
            raise StageFailed("routing.backend=transformers needs the policy in this process: with policy.kind=endpoint set routing.backend=vllm")
        if routing.backend != "vllm":
            return routing
        ep = self.cfg.policy.endpoint
        return routing.model_copy(update={"vllm_base_url": routing.vllm_base_url or ep.base_url, "vllm_model": routing.vllm_model or ep.model})

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone:
        """The router over the trained adapters, and its accuracy on held-out synthetic seeds (in the sandbox)."""
        require("evaluation.service", "the router")
        from evaluation.routing import measure_router, routing_cases
        from sandbox.env import open_env

        artifacts, _backend, router = await asyncio.to_thread(self._routed, run_id)
        ws, sandbox, pool = self.cfg.workspace, self.cfg.sandbox, self.sandbox_pool()
        synthetic = {
            c["name"]: (lambda m=ws / "synthetic_envs" / run_id / f"{c['name']}.py": open_env(m, sandbox, pool))
            for c in artifacts.capabilities
        }
        seeds = self.cfg.training.heldout_seed_list()[: self.cfg.evaluation.routing_seeds]
        cases = await asyncio.to_thread(routing_cases, synthetic, seeds)
        acc = await asyncio.to_thread(measure_router, router, cases, store=self.store, run_id=run_id)
        names = [c["name"] for c in artifacts.capabilities]
        return RouterDone(names, {"accuracy": acc.accuracy, "cases": acc.cases, "abstained": acc.abstained})

    async def evaluate(self, run_id: str, capabilities: list[str]) -> EvaluationDone:
        """Base vs TRACE (routed) vs each adapter vs the baselines on the held-out split."""
        require("evaluation.service", "evaluation")
        from evaluation.service import evaluate_run
        from gapforge.wiring import evaluation_players, make_target_env_factory

        split = await asyncio.to_thread(self.store.get_split, run_id)
        if split is None:
            raise StageFailed("no held-out split stored with the run (the analysis stores it)")
        await self._grpo_target_baseline(run_id, split)
        artifacts, backend, router = await asyncio.to_thread(self._routed, run_id)
        probe, make_env = make_target_env_factory(self.cfg, split.env)
        tasks = list(split.heldout_tasks)
        families = {t: probe.task_family(t) for t in tasks}
        probe.close()
        from evaluation.policies import GRPO_TARGET

        result = await evaluate_run(
            self.store, run_id, backend=backend, router=router, artifacts=artifacts, env=split.env, make_env=make_env, tasks=tasks,
            families=families, trials=self.cfg.evaluation.trials, max_turns=self.cfg.rollouts.max_turns, temperature=self.cfg.policy.temperature,
            concurrency=self.cfg.rollouts.concurrency, grpo_target=GRPO_TARGET in backend.adapters, seed=self.cfg.seed,
            family_trials=self.cfg.evaluation.family_trials, family_trials_policies=self.cfg.evaluation.family_trials_policies,
            focus_family=self.cfg.evaluation.focus_family,
            players=evaluation_players(self.cfg, self.store, run_id, self._base_dir(), artifacts, make_env),  # None: all play here
        )  # fmt: skip
        summary = {p.name: _metrics(p.metrics) for p in result.policies}
        return EvaluationDone(summary, Cost(policy_rollouts=sum(_played(p.metrics, families) for p in result.policies)))

    async def _grpo_target_baseline(self, run_id: str, split: Any) -> None:
        """The paper's baseline: GRPO directly on the target's analysis-split tasks, with the rollout
        budget of all capability adapters together (selection on a held-back part of that split,
        never on the evaluation tasks). Trained once per run; a failure is recorded and the
        evaluation goes on without that baseline."""
        if not self.cfg.evaluation.baseline_grpo:
            return
        try:
            require("training.service", "GRPO training")
        except StageUnavailable as e:
            self.progress("evaluate", f"no GRPO-on-target baseline: {e}")
            return
        from evaluation.policies import GRPO_TARGET
        from gapforge.wiring import job_runner
        from training.envs import EnvSpec
        from training.service import TrainJob

        if (row := self.store.get_adapter(run_id, GRPO_TARGET)) is not None and row.status == "done":
            return
        spent = sum(int(a.metrics.get("steps") or 0) for a in self.store.adapters(run_id) if a.capability and a.status == "done")
        if spent == 0:
            return  # no capability adapter: no budget to match
        tasks = sorted(split.analysis_tasks)
        held = tasks[:: max(2, len(tasks) // 4)] or tasks[:1]
        train = [t for t in tasks if t not in held]
        tcfg = self.cfg.training.model_copy(update={"max_steps": spent})  # same steps x rollouts per step as the adapters together
        env = EnvSpec(kind="target", target=split.env, train_tasks=train, heldout_tasks=held)
        out = self.cfg.workspace / "adapters" / run_id / GRPO_TARGET
        job = TrainJob(name=GRPO_TARGET, capability=None, base_model=self._base_dir(), env=env, config=tcfg, out_dir=str(out),
                       store_url=self.cfg.store_url, run_id=run_id)  # fmt: skip
        spec_dir = self.cfg.workspace / "train_jobs" / run_id
        self.progress("evaluate", f"training the GRPO-on-target baseline ({spent} steps, the adapters' budget)")
        async with self._train_gate:
            await asyncio.to_thread(stop_orphans, str(spec_dir / f"{GRPO_TARGET}.json"))
            await asyncio.to_thread(job_runner(self.cfg), [job], spec_dir, self._train_step_line)  # its steps show like the adapters'
        self._router = None  # reload the backend with the baseline adapter

    async def report(self, run_id: str) -> ReportDone:
        require("evaluation.report", "the report")
        from evaluation.report import write_report

        result = await asyncio.to_thread(write_report, self.store, run_id, self.cfg.workspace / "reports" / run_id)
        return ReportDone(str(result.path))


def _metrics(m: dict[str, Any]) -> dict[str, Any]:
    """The evaluation service's metrics -> the few numbers the state keeps."""
    pr, mr = m.get("pass_rate") or {}, m.get("mean_reward") or {}
    return {"pass_rate": pr.get("value"), "ci_low": pr.get("low"), "ci_high": pr.get("high"), "mean_reward": mr.get("value"),
            "n": m.get("episodes") or m.get("n")}  # fmt: skip


@asynccontextmanager
async def open_stages(
    cfg: GapforgeConfig, store: Any, progress: Progress | None = None, *, stages_cls: type[RealStages] = RealStages
) -> AsyncIterator[RealStages]:
    """The real stage services of a run, over StageDeps sharing the caller's store."""
    from gapforge.wiring import build_deps

    deps = dataclasses.replace(build_deps(cfg), open_store=lambda: store)
    stages: RealStages | None = None
    try:
        stages = stages_cls(cfg, deps, progress)
        yield stages
    finally:
        await deps.aclose_policies()
        routed = getattr(stages, "_router", None)
        if routed is not None and hasattr(routed[1], "aclose"):  # the evaluation backend (vLLM sessions, batching worker)
            await routed[1].aclose()
        pool, deps._pool = deps._pool, None  # the store stays open: the caller owns it
        if pool is not None:
            await asyncio.to_thread(pool.close)


def _played(metrics: dict[str, Any], families: dict[str, str]) -> int:
    """Episodes a policy actually played: its episodes less those it reused from the base (evaluation.reuse)."""
    per_family = metrics.get("trials_by_family") or {}
    reused = sum(per_family.get(families.get(t, ""), 0) for t in metrics.get("reused_base_tasks") or [])
    return int(metrics.get("episodes", 0)) - reused
