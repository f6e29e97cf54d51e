"""`train` (one LoRA adapter per capability, GRPO on its accepted synthetic env) and `train_baseline`
(the paper's GRPO-on-target baseline): each a job in its own process (training.run.run_jobs, which
also stops a process left running by a killed earlier run: its pid file beside the job spec; as many
at once as `common.training_slots` allows), or with
executor.kind ray a Ray task per job whose adapter comes back to this machine (`gapforge.executor.job_runner`)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.graph.context import BaselineDone, Cost, StageFailed, TrainingDone

if TYPE_CHECKING:
    from gapforge.config import GapforgeConfig
    from gapforge.stages import RunStages
    from gapforge.training.service import TrainJob


def job_cost(res: Any, rollouts_per_step: int) -> Cost:
    """A finished job's counters: its training rollouts, its process's CPU seconds (measured there: a driver's
    children's CPU would mix jobs of capability branches that run side by side), and the tokens an LLM user simulator
    spent in its rollouts (TrainResult.user_tokens: the target's user in GRPO on the target)."""
    prompt, completion = res.user_tokens
    return Cost(
        policy_rollouts=res.steps * rollouts_per_step,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cpu_s=res.cpu_s,
    )


def _step_line(sc: RunStages):
    def on_event(name: str, event: dict[str, Any]) -> None:
        """One progress line per GRPO step of a training process (its JSON step events)."""
        if event.get("event") == "step":
            sc.progress(
                f"train {name}",
                f"step {event.get('step')}/{event.get('max_steps')} reward {event.get('reward', 0):.3f} "
                f"informative {event.get('informative_share', 0):.2f}",
            )

    return on_event


async def _run_job(sc: RunStages, run_id: str, job: Any) -> Any:
    from gapforge.executor import job_runner

    threads, spec_dir = sc.train_threads, sc.deps.workspace.train_jobs(run_id)
    lend: Any = contextlib.nullcontext()
    if threads is not None:
        update: dict[str, Any] = {"cpu_threads": threads}
        if sc.cfg.executor.kind == "local":  # CPU jobs sharing this machine (cores.DriverCores)
            update["threads_file"] = str(spec_dir / f"{job.name}.threads")
            lend = sc.driver_cores.lend(threads, Path(update["threads_file"]))
        job = job.model_copy(update=update)
    async with (
        sc.train_gate
    ):  # common.training_slots: jobs at once on this machine; on Ray, as many as the cluster places
        with lend:
            (outcome,) = await asyncio.to_thread(job_runner(sc.cfg.executor), [job], spec_dir, _step_line(sc))
    return outcome


def accepted_module(sc: RunStages, run_id: str, capability: str) -> Path:
    """The capability's accepted synthetic env module (synthesis writes it; written again from the store when only the
    store holds it, e.g. a run synthesized in another workspace)."""
    module = sc.deps.workspace.synthetic_env(run_id, capability)
    if not module.is_file():
        accepted = [e for e in sc.store.synthetic_envs(run_id, capability) if e.status == "accepted"]
        if not accepted:
            raise StageFailed(f"no accepted synthetic env module at {module}")
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(max(accepted, key=lambda e: e.attempt).code)
    return module


async def train(sc: RunStages, run_id: str, capability: str, *, module: str | None = None) -> TrainingDone:
    """GRPO + LoRA on the capability's accepted synthetic env (written by synthesis), or on `module` (`gapforge train
    --module`), in its own process."""
    from gapforge.training.envs import EnvSpec
    from gapforge.training.service import TrainJob

    cfg, ws = sc.cfg, sc.deps.workspace
    path = (
        Path(module).resolve() if module else accepted_module(sc, run_id, capability)
    )  # (a file check: no thread, no await)
    out = ws.adapter_dir(run_id, capability)
    env = EnvSpec(kind="sandbox", module=str(path), sandbox=cfg.sandbox.model_dump(mode="json"))
    job = TrainJob(
        name=capability,
        capability=capability,
        base_model=sc.base_dir(),
        env=env,
        config=cfg.training,
        out_dir=str(out),
        tracking_dir=str(ws.tracking_dir(run_id, capability)),
        store_url=cfg.store_url,
        run_id=run_id,
    )
    sc.progress(f"train {capability}", f"GRPO in its own process (log: {out}/steps.jsonl)")
    outcome = await _run_job(sc, run_id, job)
    res = outcome.result
    if res is None or res.status != "done":
        return TrainingDone(capability, None, False, error=outcome.error or "training failed")
    return TrainingDone(
        capability,
        capability,
        True,
        res.heldout_before,
        res.heldout_after,
        kept_step=res.best_step,
        cost=job_cost(res, cfg.training.rollouts_per_step),
    )


def baseline_job(
    cfg: GapforgeConfig,
    split: Any,
    *,
    n_adapters: int,
    base_model: str,
    out_dir: str,
    run_id: str | None,
    name: str | None = None,
    scale: float = 1.0,
    learning_rate: float | None = None,
) -> TrainJob:
    """The GRPO-on-target job: one LoRA adapter with the adapters' GRPO/LoRA settings, on the analysis split's tasks (a
    quarter held back for its own selection, never the evaluation's tasks), for `scale` x the training rollouts of
    all `n_adapters` capability adapters together (training.budget), against the user simulator the evaluation
    plays it with (rollouts.user). `learning_rate`: another than training.learning_rate (bench/baseline_lr.py)."""
    from gapforge.evaluation.policies import GRPO_TARGET
    from gapforge.store.workspace import Workspace
    from gapforge.training.budget import baseline_settings, baseline_tasks
    from gapforge.training.envs import EnvSpec
    from gapforge.training.service import TrainJob

    train_tasks, held = baseline_tasks(split.analysis_tasks, cfg.training.heldout_seeds)
    tcfg = baseline_settings(cfg, len(held), n_adapters, scale=scale, learning_rate=learning_rate)
    from gapforge.wiring import (
        user_simulator_endpoint,
    )  # llm.endpoint, or the served policy (rollouts.user_endpoint=policy)

    user_endpoint = user_simulator_endpoint(cfg).model_dump(mode="json") if cfg.rollouts.user == "llm" else None
    env = EnvSpec(
        kind="target",
        target=split.env,
        train_tasks=train_tasks,
        heldout_tasks=held,
        user=cfg.rollouts.user,
        user_endpoint=user_endpoint,
    )
    return TrainJob(
        name=name or GRPO_TARGET,
        capability=None,
        base_model=base_model,
        env=env,
        config=tcfg,
        out_dir=out_dir,
        tracking_dir=str(Workspace(Path(cfg.workspace)).tracking_dir(run_id, name or GRPO_TARGET)) if run_id else None,
        store_url=cfg.store_url,
        run_id=run_id,
    )


async def train_baseline(sc: RunStages, run_id: str) -> BaselineDone:
    """The paper's baseline: GRPO directly on the target's analysis-split tasks, with the training rollout budget of
    all capability adapters together (`baseline_job`). Trained once per run; a failure is recorded and the
    evaluation goes on without it."""
    cfg, store = sc.cfg, sc.store
    from gapforge.evaluation.comparison import GRPO_COMPARISON, GRPO_TARGET

    if not GRPO_COMPARISON.enabled(cfg.evaluation):
        return BaselineDone(None, skipped="off (not in evaluation.comparisons)")

    row = await asyncio.to_thread(store.get_adapter, run_id, GRPO_TARGET)
    if row is not None and row.status == "done":
        return BaselineDone(GRPO_TARGET, int(row.metrics.get("steps") or 0))
    trained = [a for a in await asyncio.to_thread(store.adapters, run_id) if a.capability and a.status == "done"]
    if not trained:
        return BaselineDone(None, skipped="no capability adapter: no rollout budget to match")
    split = await asyncio.to_thread(store.get_split, run_id)
    if split is None:
        raise StageFailed("no task split stored with the run (the analysis stores it)")
    if len(split.analysis_tasks) < 2:  # baseline_tasks would hold its one task back for selection: none to train on
        n = len(split.analysis_tasks)
        why = f"the analysis split has {n} task{'s' * (n != 1)}: it trains on some and selects its checkpoint on others"
        return BaselineDone(None, skipped=why)
    job = baseline_job(
        cfg,
        split,
        n_adapters=len(trained),
        base_model=sc.base_dir(),
        run_id=run_id,
        out_dir=str(sc.deps.workspace.adapter_dir(run_id, GRPO_TARGET)),
    )
    tcfg = job.config
    sc.progress(
        "train_baseline",
        f"GRPO on the target's tasks ({tcfg.max_steps} steps x {tcfg.rollouts_per_step} rollouts: "
        f"the budget of {len(trained)} adapter{'s' if len(trained) > 1 else ''})",
    )
    outcome = await _run_job(sc, run_id, job)
    res = outcome.result
    if res is None or res.status != "done":
        return BaselineDone(None, error=outcome.error or "training failed")
    done = BaselineDone(GRPO_TARGET, res.steps, cost=job_cost(res, tcfg.rollouts_per_step))
    if done.cost.policy_rollouts:  # trained now: the evaluation loads the routed models again, with it
        await sc.routing.aclose()
    return done
