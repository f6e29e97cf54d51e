"""What the executor tests share: episodes keyed for comparison, and one evaluation played here and elsewhere."""

from __future__ import annotations

from typing import Any

from gapforge.evaluation.policies import standard_policies
from gapforge.evaluation.run import EvalPlan, child_run_id, evaluate


def episodes_by_key(store: Any, run_id: str) -> dict[tuple[str, int], tuple]:
    return {
        (r.task_id, r.sample): (r.messages, r.reward, r.success, r.termination, r.turns) for r in store.episodes(run_id)
    }


def sorted_episodes(store: Any, run_id: str, policy: str) -> list[Any]:
    return sorted(store.episodes(child_run_id(run_id, policy)), key=lambda e: (e.task_id, e.sample))


async def evaluate_each(
    store: Any,
    runs: dict[str, str],
    backend: Any,
    router: Any,
    caps: list[dict],
    adapters: list[str],
    names: tuple[str, ...],
    tasks: list[str],
    make_env: Any,
    players: Any,
    elsewhere: str,
) -> dict[str, Any]:
    """The same evaluation once per run in `runs`; the run named `elsewhere` plays through `players`."""
    out = {}
    for where, run_id in runs.items():
        every = standard_policies(backend, router, caps, temperature=1.0, capability_adapters=adapters)
        plan = EvalPlan(run_id, "shop", tasks, trials=2, max_turns=3, temperature=1.0, concurrency=4)
        out[where] = await evaluate(
            store,
            plan,
            make_env=make_env,
            policies={n: every[n] for n in names},
            families={t: "f" for t in tasks},
            players=players if where == elsewhere else None,
        )
    return out


def assert_same_evaluation(
    store: Any, runs: dict[str, str], results: dict[str, Any], names: tuple[str, ...], keep: tuple[str, ...]
) -> None:
    """Every policy stored the same episodes and the same metrics (`keep`) in both runs."""
    here, there = list(runs)
    for name in names:
        a, b = (sorted_episodes(store, runs[w], name) for w in (here, there))
        assert [(e.task_id, e.sample, e.messages, e.reward) for e in b] == [
            (e.task_id, e.sample, e.messages, e.reward) for e in a
        ], name
        assert {k: v for k, v in results[there].get(name).metrics.items() if k in keep} == {
            k: v for k, v in results[here].get(name).metrics.items() if k in keep
        }, name
