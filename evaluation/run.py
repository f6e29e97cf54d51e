"""The evaluate stage service (docs/evaluation.md): base vs TRACE vs single adapters vs baselines on the held-out
split of the target env, the same tasks for every policy, K trials each, numbers with intervals stored in the
evaluations table.

Each evaluated policy's episodes go to a child run `<run>.eval.<policy>` (kind "evaluation") through
agents.rollouts.collect, so a killed evaluation resumes where it stopped (episodes are keyed by run, env, task, trial)
and every trajectory stays inspectable (`gapforge rollouts show <run>.eval.<policy>`). Trial i of every task is sample
i: with a seeded local backend the same (task, trial) pair sees the same sampling seed sequence across re-runs and
across policies (common random numbers), so episode (task, i) of a policy is paired with episode (task, i) of the base
(`vs_base_paired`, `vs_base_by_family`).

`plan.family_trials` gives the tasks of some families more trials, for the policies in `plan.family_trials_policies`
only, and so does `plan.min_family_episodes` (every family at least that many episodes: ceil(n / its tasks) trials per
task); a routed policy copies the episodes of the tasks it routes to the base, or to an adapter evaluated alone, from
that policy's child run (evaluation.reuse) instead of playing them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gapforge.agents.errors import IncompleteStage
from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.agents.router import first_user_message
from gapforge.envs.protocol import Message, PolicyModel, TargetEnvironment
from gapforge.evaluation import stats
from gapforge.evaluation.config import MAX_FAMILY_TRIALS
from gapforge.evaluation.reuse import copy_episodes, reuses_base, sources
from gapforge.evaluation.summary import BASE, ROUTED
from gapforge.faults import InputFault

if TYPE_CHECKING:
    from gapforge.store import Store


class UnknownFamily(InputFault, ValueError):
    """evaluation.family_trials or focus_family names a family none of the evaluated tasks is in (exit 2, one line)."""


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
    family_trials: Mapping[str, int] = field(default_factory=dict)  # family -> trials per task, for the policies:
    family_trials_policies: Sequence[str] = (BASE, ROUTED)
    min_family_episodes: int = 0  # powered families: >= this many episodes per family for those policies (0: off)
    focus_family: str | None = None  # the headline family (stored with the metrics for the report and the summary)
    scope: str = "eval"  # rows `<scope>:<policy>`, child runs `<run>.<scope>.<policy>` (`all_tasks`: the paper's protocol, apart)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1, got {self.trials}")
        for family, k in self.family_trials.items():
            if not 1 <= k <= MAX_FAMILY_TRIALS:
                raise ValueError(f"family_trials[{family!r}] = {k}: use 1..{MAX_FAMILY_TRIALS} trials per task")

    def task_trials(self, name: str, families: Mapping[str, str]) -> dict[str, int]:
        """Trials per task for the policy evaluated as `name`."""
        if name not in self.family_trials_policies:
            return {t: self.trials for t in self.tasks}
        sizes = Counter(families[t] for t in self.tasks if t in families)
        out = {}
        for t in self.tasks:
            family = families.get(t)
            k = self.family_trials.get(family, self.trials) if family is not None else self.trials
            if family is not None and self.min_family_episodes:  # every family powered: ceil(episodes / its tasks) each
                k = max(k, min(MAX_FAMILY_TRIALS, -(-self.min_family_episodes // sizes[family])))
            out[t] = k
        return out


@dataclass(frozen=True)
class PolicyEvaluation:
    name: str  # evaluation name, e.g. "base", "trace_routed", "adapter:<name>", "capability_hints"
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


def child_run_id(run_id: str, name: str, scope: str = "eval") -> str:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    return f"{run_id}.{scope}.{safe}"[:64]


async def _play(
    store: Store,
    plan: EvalPlan,
    name: str,
    policy: PolicyModel,
    child: str,
    counts: dict[str, int],
    *,
    make_env: Callable[[], TargetEnvironment],
    families: dict[str, str],
    player: Any = None,
) -> None:
    """Collect every (task, sample < counts[task]) the child run lacks: one collect per trial count."""
    by_count: dict[int, list[str]] = {}
    for t in plan.tasks:
        by_count.setdefault(counts[t], []).append(t)
    for k, tasks in sorted(by_count.items()):
        cplan = CollectPlan(child, plan.env, tasks, k, plan.concurrency, plan.max_turns, plan.temperature)
        done = await collect(cplan, make_env=make_env, policy=policy, sink=store, families=families, player=player)
        if not done.complete:  # metrics over a partial sample would be silently biased
            kinds = ", ".join(f"{c}={v}" for c, v in done.infra_counts().most_common())
            raise IncompleteStage(
                f"evaluation {plan.run_id}: {len(done.infra_failures)} episode(s) of policy {name!r} ended in infrastructure "
                f"failures ({kinds}) and were not stored: run the same command again to finish (stored episodes are kept)"
            )


async def evaluate(
    store: Store,
    plan: EvalPlan,
    *,
    make_env: Callable[[], TargetEnvironment],
    policies: Mapping[str, PolicyModel],
    families: Mapping[str, str] | None = None,
    on_policy_done: Callable[[str], None] | None = None,
    players: Callable[[str, PolicyModel], AbstractAsyncContextManager[Any]] | None = None,
    together: bool = True,
) -> EvaluationResult:
    """Run every policy on plan.tasks x its trials (skipping stored episodes), then compute and store metrics.

    `policies` must include "base" (the reference for paired differences). A policy with a `decisions` attribute
    (agents.router.RoutedPolicy) also gets its routing per task stored, and over the same base object it reuses the
    episodes of the tasks it routes to the base or to an adapter evaluated here alone: it plays after them; with
    `together`, every other policy at the same time as the base (each with `plan.concurrency` episodes in flight),
    else one after the other (Ray: each policy's player starts its own actors, each with the backend). `players(name, policy)` (executor/) may play a
    policy's episodes elsewhere; this call still writes them.
    """
    if BASE not in policies:
        raise ValueError("evaluate() needs a policy named 'base' (paired differences are against it)")
    families = dict(families or {})
    known = set(families.values())
    for family in [*plan.family_trials, *([plan.focus_family] if plan.focus_family else [])]:
        if family not in known:
            raise UnknownFamily(
                f"family {family!r} (evaluation.family_trials / focus_family) has no task here: use one of {', '.join(sorted(known)) or 'none'}"
            )
    episodes: dict[str, dict[str, dict[int, tuple[float, bool]]]] = {}
    routing: dict[str, dict[str, Any]] = {}
    reused: dict[str, list[Any]] = {}
    order = [BASE, *(n for n in policies if n != BASE)]
    reusing = {n for n in order[1:] if reuses_base(policies[n], policies[BASE])}
    children = {n: child_run_id(plan.run_id, n, plan.scope) for n in order}
    counts = {n: plan.task_trials(n, families) for n in order}

    async def play(name: str) -> None:
        policy, child = policies[name], children[name]
        config = {
            "parent": plan.run_id,
            "policy": name,
            "env": plan.env,
            "tasks": plan.tasks,
            "trials": plan.trials,
            "family_trials": dict(plan.family_trials) if name in plan.family_trials_policies else {},
        }
        store.create_run("evaluation", config, run_id=child, exist_ok=True)
        if name in reusing:
            await copy_episodes(
                store,
                policy=policy,
                env=plan.env,
                sources=sources(policy, children, policies),
                child=child,
                counts=counts[name],
            )
        async with players(name, policy) if players is not None else nullcontext() as player:  # executor/: Ray, or None
            await _play(
                store, plan, name, policy, child, counts[name], make_env=make_env, families=families, player=player
            )
        if on_policy_done is not None:
            on_policy_done(name)

    # The base and every policy that does not reuse episodes play at once, so no policy's last few episodes leave the
    # workers idle (each episode seeds from its (task, sample): the same episodes in any order); a policy that reuses
    # theirs (routed) plays after them. A policy that fails lets the others finish
    # (their episodes are stored for the re-run), then the first failure in policy order is raised.
    leading, after_base = [n for n in order if n not in reusing], [n for n in order if n in reusing]
    waves = [leading, after_base] if together else [[n] for n in leading + after_base]
    for wave in waves:
        outcomes = await asyncio.gather(*(play(n) for n in wave), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            raise failed[0]
    for name in order:
        policy, child = policies[name], children[name]
        rows = sorted(
            (r for r in store.episodes(child, env=plan.env) if r.sample < counts[name].get(r.task_id, 0)),
            key=lambda r: (r.task_id, r.sample),
        )
        episodes[name] = {}
        for r in rows:
            episodes[name].setdefault(r.task_id, {})[r.sample] = (r.reward, r.success)
        if name in reusing:  # a copy keeps its source's policy name
            reused[name] = [r for r in rows if r.policy != policy.name]
        decisions = getattr(policy, "decisions", None)
        if decisions is not None:
            first = {r.task_id: first_user_message(r.messages) for r in rows}
            for m in sorted({m for m in first.values() if m is not None} - set(decisions)):  # stored by an earlier call
                await policy.decide([Message.user(m)])
            routing[name] = {t: decisions[m].to_json() for t, m in sorted(first.items()) if m in decisions}
    result = EvaluationResult(plan.run_id, plan.env, list(plan.tasks), plan.trials)
    base = episodes[BASE]
    for name, policy in policies.items():
        trials = stats.as_trials(episodes[name])
        boot = {"n_boot": plan.n_boot, "seed": plan.seed}
        metrics: dict[str, Any] = {
            "env": plan.env,
            "trials": plan.trials,
            "trials_by_family": {f: counts[name][t] for t, f in sorted(families.items()) if t in counts[name]},
            "focus_family": plan.focus_family,
            "child_run": children[name],
            **stats.summarize(trials, **boot),
            "by_family": stats.by_family(trials, families, **boot),
            "vs_base": None if name == BASE else stats.paired_difference(trials, stats.as_trials(base), **boot),
            "vs_base_paired": None if name == BASE else stats.paired_episodes(episodes[name], base, **boot),
            "vs_base_by_family": None
            if name == BASE
            else stats.paired_by_family(episodes[name], base, families, **boot),
        }
        if name in reused:
            metrics["reused_base_tasks"] = sorted({r.task_id for r in reused[name] if r.policy == policies[BASE].name})
            metrics["reused_episodes"] = len(reused[name])
        if name in routing:
            metrics["routing"] = routing[name]
        prompt_id = getattr(policy, "prompt_id", None)
        if prompt_id:
            metrics["prompt"] = prompt_id
        store.put_evaluation(plan.run_id, f"{plan.scope}:{name}", policy=policy.name, metrics=metrics)
        result.policies.append(PolicyEvaluation(name, policy.name, children[name], metrics))
    return result
