"""The evaluate stage service (DESIGN.md §1.6): base vs TRACE vs single adapters vs
baselines on the held-out split of the target env, the same tasks for every
policy, K trials each, numbers with intervals stored in the evaluations table.

Each evaluated policy's episodes go to a child run `<run>.eval.<policy>` (kind
"evaluation") through agents.rollouts.collect, so a killed evaluation resumes
where it stopped (episodes are keyed by run, env, task, trial) and every
trajectory stays inspectable (`gapforge rollouts show <run>.eval.<policy>`).
Trial i of every task is sample i: with a seeded local backend the same
(task, trial) pair sees the same sampling seed sequence across re-runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.errors import IncompleteStage
from agents.rollouts import CollectPlan, collect
from envs.protocol import PolicyModel, TargetEnvironment
from evaluation import stats

BASE = "base"


@dataclass(frozen=True)
class EvalPlan:
    run_id: str
    env: str
    tasks: list[str]
    trials: int = 4
    max_turns: int = 30
    temperature: float | None = None
    concurrency: int = 4
    n_boot: int = 1000
    seed: int = 0


@dataclass(frozen=True)
class PolicyEvaluation:
    name: str  # evaluation name, e.g. "base", "trace_routed", "adapter:<name>", "baseline_hints"
    policy: str  # the PolicyModel's own name
    child_run: str
    metrics: dict[str, Any]


@dataclass(frozen=True)
class EvaluationResult:
    run_id: str
    env: str
    tasks: list[str]
    trials: int
    policies: list[PolicyEvaluation] = field(default_factory=list)

    def get(self, name: str) -> PolicyEvaluation:
        return next(p for p in self.policies if p.name == name)


class EvalStore:
    """The part of store.Store evaluation needs (typing only)."""

    def create_run(self, kind: str, config: Mapping[str, Any], run_id: str | None = None, *, exist_ok: bool = False) -> str: ...
    def episodes(self, run_id: str, env: str | None = None, success: bool | None = None) -> list[Any]: ...
    def episode_keys(self, run_id: str, env: str) -> set[tuple[str, int]]: ...
    def put_episode(self, run_id: str, env: str, task_id: str, sample: int, **fields: Any) -> int: ...
    def put_evaluation(self, run_id: str, name: str, *, policy: str, metrics: Mapping[str, Any]) -> Any: ...


def child_run_id(run_id: str, name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    return f"{run_id}.eval.{safe}"[:64]


def _first_user(messages: list[Any]) -> str | None:
    for m in messages:
        if m.get("role") == "user":
            return m.get("content")
    return None


async def evaluate(
    store: Any,
    plan: EvalPlan,
    *,
    make_env: Callable[[], TargetEnvironment],
    policies: Mapping[str, PolicyModel],
    families: Mapping[str, str] | None = None,
    on_policy_done: Callable[[str], None] | None = None,
) -> EvaluationResult:
    """Run every policy on plan.tasks x plan.trials (skipping stored episodes), then compute and store metrics.

    `policies` must include "base" (the reference for paired differences). A policy with a
    `decisions` attribute (agents.routed_policy.RoutedPolicy) also gets its routing per task stored.
    """
    if BASE not in policies:
        raise ValueError("evaluate() needs a policy named 'base' (paired differences are against it)")
    families = dict(families or {})
    trials: dict[str, dict[str, list[tuple[float, bool]]]] = {}
    children: dict[str, str] = {}
    routing: dict[str, dict[str, Any]] = {}
    for name, policy in policies.items():
        child = child_run_id(plan.run_id, name)
        children[name] = child
        config = {"parent": plan.run_id, "policy": name, "env": plan.env, "tasks": plan.tasks, "trials": plan.trials}
        store.create_run("evaluation", config, run_id=child, exist_ok=True)
        cplan = CollectPlan(child, plan.env, list(plan.tasks), plan.trials, plan.concurrency, plan.max_turns, plan.temperature)
        done = await collect(cplan, make_env=make_env, policy=policy, sink=store, families=families)
        if not done.complete:  # metrics over a partial sample would be silently biased
            counts = ", ".join(f"{k}={v}" for k, v in done.infra_counts().most_common())
            raise IncompleteStage(
                f"evaluation {plan.run_id}: {len(done.infra_failures)} episode(s) of policy {name!r} ended in infrastructure "
                f"failures ({counts}) and were not stored: run the same command again to finish (stored episodes are kept)"
            )
        rows = [r for r in store.episodes(child, env=plan.env) if r.task_id in set(plan.tasks) and r.sample < plan.trials]
        per_task: dict[str, list[tuple[float, bool]]] = {}
        for r in rows:
            per_task.setdefault(r.task_id, []).append((r.reward, r.success))
        trials[name] = per_task
        decisions = getattr(policy, "decisions", None)
        if decisions is not None:
            first = {r.task_id: _first_user(r.messages) for r in rows}
            routing[name] = {t: decisions[m].to_json() for t, m in sorted(first.items()) if m in decisions}
        if on_policy_done is not None:
            on_policy_done(name)
    result = EvaluationResult(plan.run_id, plan.env, list(plan.tasks), plan.trials)
    for name, policy in policies.items():
        metrics: dict[str, Any] = {
            "env": plan.env,
            "trials": plan.trials,
            "child_run": children[name],
            **stats.summarize(trials[name], n_boot=plan.n_boot, seed=plan.seed),
            "by_family": stats.by_family(trials[name], families, n_boot=plan.n_boot, seed=plan.seed),
            "vs_base": None if name == BASE else stats.paired_difference(trials[name], trials[BASE], n_boot=plan.n_boot, seed=plan.seed),
        }
        if name in routing:
            metrics["routing"] = routing[name]
        prompt_id = getattr(policy, "prompt_id", None)
        if prompt_id:
            metrics["prompt"] = prompt_id
        store.put_evaluation(plan.run_id, f"eval:{name}", policy=policy.name, metrics=metrics)
        result.policies.append(PolicyEvaluation(name, policy.name, children[name], metrics))
    return result
