"""Router accuracy (issue 12 §2): route held-out synthetic tasks whose capability is known, plus target tasks from
families no capability covers ("none"), and store accuracy + confusion matrix as the evaluation `router_accuracy`.

`routing_cases(...)` builds the cases from environments through the ONE Environment protocol: `reset(seed)` of each
capability's synthetic env (held-out seeds: a SandboxedEnv in production) and `reset(task)` of the target env for the
uncovered families; the first user message is what the router reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapforge.agents.router import NONE, Router, confusion, first_user_message
from gapforge.envs.protocol import Environment

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(frozen=True)
class RoutingCase:
    first_message: str
    expected: str  # a capability name, or "none"
    source: str  # e.g. "synthetic:<capability>:seed=7" or "target:<task id>"


@dataclass(frozen=True)
class RouterAccuracy:
    accuracy: float | None
    labels: list[str]
    matrix: list[list[int]]
    abstained: int
    cases: int


def routing_cases(
    synthetic: Mapping[str, Callable[[], Environment]],
    seeds: Sequence[int],
    target: Callable[[], Environment] | None = None,
    none_tasks: Sequence[str] = (),
) -> list[RoutingCase]:
    """First user messages of held-out synthetic seeds (expected: their capability) and of uncovered target tasks (expected: none)."""
    cases: list[RoutingCase] = []

    def first(make: Callable[[], Environment], task: Any) -> str:
        env = make()
        try:
            return first_user_message(env.reset(task)) or ""
        finally:
            env.close()

    for capability, make in synthetic.items():
        cases += [RoutingCase(first(make, s), capability, f"synthetic:{capability}:seed={s}") for s in seeds]
    if target is not None:
        cases += [RoutingCase(first(target, t), NONE, f"target:{t}") for t in none_tasks]
    return cases


def env_openings(make_env: Callable[[], Environment], seeds: Sequence[int]) -> list[str]:
    """The first user messages of an env's seeds (the gate's examples of its capability)."""
    return [c.first_message for c in routing_cases({"env": make_env}, seeds)]


def measure_router(
    router: Router, cases: Sequence[RoutingCase], *, store: Store | None = None, run_id: str | None = None
) -> RouterAccuracy:
    """Batch-route every case; an abstention counts as 'none' (the base model answers). Stored when a store is given."""
    decisions = router.route_batch([c.first_message for c in cases])
    predicted = [d.capability or NONE for d in decisions]
    labels = [o.capability for o in router.options] + [NONE]
    conf = confusion([(c.expected, p) for c, p in zip(cases, predicted)], labels)
    result = RouterAccuracy(conf["accuracy"], labels, conf["matrix"], sum(d.abstained for d in decisions), len(cases))  # type: ignore[arg-type]
    if store is not None and run_id is not None:
        metrics = {
            "accuracy": result.accuracy,
            "labels": labels,
            "matrix": result.matrix,
            "abstained": result.abstained,
            "cases": [
                {"source": c.source, "expected": c.expected, "decision": d.to_json()} for c, d in zip(cases, decisions)
            ],
            "prompt": router.prompt_id,
            "margin": router.config.margin,
        }
        store.put_evaluation(run_id, "router_accuracy", policy="router", metrics=metrics)
    return result
