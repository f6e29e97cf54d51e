"""Oracle routing (evaluation/oracle.py) on hand-made paired episodes: the choice is made on the even-numbered
common trials and scored on the odd-numbered ones, tasks with < 2 common trials are left out and counted, and the
same numbers come back through a real store, the stored `oracle` row and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gapforge.evaluation import stats
from gapforge.evaluation.oracle import oracle_from_store, oracle_routing, store_oracle
from gapforge.evaluation.report import write_report
from gapforge.store import Store

T, F = True, False
CANDIDATES = ["base", "adapter:a", "adapter:b"]


def _eps(pattern: list[bool], rewards: list[float] | None = None) -> dict[int, tuple[float, bool]]:
    rewards = rewards or [1.0 if s else 0.0 for s in pattern]
    return dict(enumerate(zip(rewards, pattern)))


def _episodes() -> dict[str, dict[str, dict[int, tuple[float, bool]]]]:
    """t1: adapter a wins the selecting trials (0, 2) and loses the scoring ones (1, 3); t2: base and b tie on success at
    trial 0, b has the higher reward; t3: b wins; t4: one trial each; t5: the base has 6 trials, the adapters 1."""
    return {
        "base": {
            "t1": _eps([F, T, F, T]),
            "t2": _eps([T, T], [0.9, 1.0]),
            "t3": _eps([F, F, F]),
            "t4": _eps([T]),
            "t5": _eps([T] * 6),
        },
        "adapter:a": {
            "t1": _eps([T, F, T, F]),
            "t2": _eps([F, F]),
            "t3": _eps([F, F, F]),
            "t4": _eps([F]),
            "t5": _eps([F]),
        },
        "adapter:b": {
            "t1": _eps([F, F, F, F]),
            "t2": _eps([T, F], [1.0, 0.0]),
            "t3": _eps([T, T, F]),
            "t4": _eps([F]),
            "t5": _eps([F]),
        },
        "trace_routed": {
            "t1": _eps([T, F, T, F]),
            "t2": _eps([T, T]),
            "t3": _eps([F, F, F]),
            "t4": _eps([T]),
            "t5": _eps([T] * 6),
        },
    }


FAMILIES = {"t1": "write", "t2": "write", "t3": "refusal", "t4": "solo", "t5": "refusal"}
ROUTER = {"t1": "adapter:a", "t2": "base", "t3": "adapter:b", "t4": "base", "t5": "base"}


def _check(m: dict) -> None:
    assert m["choices"] == {"t1": "adapter:a", "t2": "adapter:b", "t3": "adapter:b"}
    assert m["tasks"] == 3 and m["left_out"] == {"refusal": 1, "solo": 1}
    scored = m["scored"]
    # the oracle scores 0 on t1 (a's odd trials), 0 on t2 (b's trial 1), 1 on t3 (b's trial 1): 1/3, while the best policy
    # on ALL of t1's trials would have read 0.5 there (the selection bias this split removes)
    assert scored["oracle"]["pass_rate"]["value"] == pytest.approx(1 / 3)
    assert scored["oracle"]["episodes"] == 4  # t1: trials 1 and 3; t2, t3: trial 1
    assert scored["base"]["pass_rate"]["value"] == pytest.approx(2 / 3)  # t1 1.0, t2 1.0, t3 0.0
    assert scored["trace_routed"]["pass_rate"]["value"] == pytest.approx(1 / 3)  # t1 0.0, t2 1.0, t3 0.0
    assert m["vs_oracle"]["trace_routed"]["pass_rate"]["value"] == pytest.approx(0.0)  # (0 - 0 + 1 - 0 + 0 - 1) / 3
    assert m["vs_oracle"]["base"]["pass_rate"]["value"] == pytest.approx(1 / 3)
    assert m["vs_oracle"]["trace_routed"]["episodes"] == 4
    assert m["routed_vs"]["base"]["pass_rate"]["value"] == pytest.approx(-1 / 3)
    assert m["routed_vs"]["adapter:a"]["pass_rate"]["value"] == pytest.approx((0 + 1 + 0) / 3)
    conf = m["router_vs_oracle"]  # rows: the oracle's choice; t2's oracle chose b where the router kept the base
    assert conf["labels"] == CANDIDATES and conf["matrix"] == [[0, 0, 0], [0, 1, 0], [1, 0, 1]]
    assert conf["accuracy"] == pytest.approx(2 / 3)


def test_oracle_selects_on_even_trials_and_scores_on_odd_ones() -> None:
    _check(oracle_routing(_episodes(), CANDIDATES, router_choice=ROUTER, families=FAMILIES, n_boot=200))


def test_single_trial_tasks_leave_the_oracle_empty_and_are_counted() -> None:
    one = {p: {t: {0: rows[0]} for t, rows in tasks.items()} for p, tasks in _episodes().items()}
    m = oracle_routing(one, CANDIDATES, router_choice=ROUTER, families=FAMILIES, n_boot=50)
    assert (
        m["tasks"] == 0
        and m["left_out"] == {"write": 2, "refusal": 2, "solo": 1}
        and m["scored"] == {}
        and "router_vs_oracle" not in m
    )


def _store_run(tmp_path: Path) -> tuple[Store, str]:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    run = store.create_run("trace", {}, run_id="r1")
    store.put_split(
        run, env="shop", seed=0, fraction=0.5, analysis_tasks=[], heldout_tasks=sorted(FAMILIES), families=FAMILIES
    )
    for policy, tasks in _episodes().items():
        child = store.create_run("evaluation", {"parent": run}, run_id=f"{run}.eval.{policy.replace(':', '_')}")
        for task, rows in tasks.items():
            for sample, (reward, success) in rows.items():
                store.put_episode(
                    child,
                    "shop",
                    task,
                    sample,
                    policy=policy,
                    messages=[],
                    reward=reward,
                    success=success,
                    components={},
                    termination="done",
                    error=None,
                    turns=1,
                    timings={},
                )
        store.put_episode(
            child,
            "shop",
            "t1",
            7,
            policy=policy,
            messages=[],
            reward=1.0,
            success=True,
            components={},
            termination="done",
            error=None,
            turns=1,
            timings={},
        )  # a sample past the evaluated trial count: not counted
        trials = {"base": {"refusal": 6}, "trace_routed": {"refusal": 6}}.get(policy, {})
        metrics = {
            "env": "shop",
            "trials": 4,
            "child_run": child,
            "trials_by_family": {"write": 4, "refusal": 3, "solo": 1, **trials},
            **stats.summarize(stats.as_trials(tasks), n_boot=50),
        }
        if policy == "trace_routed":
            metrics["routing"] = {
                t: {"adapter": c.removeprefix("adapter:") if c != "base" else None} for t, c in ROUTER.items()
            }
        store.put_evaluation(run, f"eval:{policy}", policy=policy, metrics=metrics)
    return store, run


def test_the_oracle_from_the_store_is_stored_and_reported(tmp_path: Path) -> None:
    store, run = _store_run(tmp_path)
    with store:
        _check(oracle_from_store(store, run, n_boot=200))
        stored = store_oracle(store, run, n_boot=200)
        assert store.get_evaluation(run, "oracle").metrics == stored
        text = write_report(store, run, tmp_path / "report").path.read_text()
    section = text.split("## Oracle routing (yardstick)")[1].split("## Router")[0]
    assert "Tasks used: 3; left out (fewer than 2 common trials): 2 (`refusal` 1, `solo` 1)." in section
    assert "The oracle chose: 1 adapter:a, 2 adapter:b." in section
    assert "| oracle | 33.3% [" in section and "| trace_routed | 33.3% [" in section
    assert "| base | 66.7% [" in section and "+33.3 points" in section
    assert "| adapter:b | 1 | 0 | 1 |" in section and "agreement 67%" in section


class _Says:
    """A PolicyModel that answers one line of text."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def respond(
        self, messages: list[Any], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Any:
        from gapforge.envs.protocol import Message

        return Message.assistant(f"{self.name} here")


def test_a_resumed_evaluation_still_stores_the_routers_choices(tmp_path: Path) -> None:
    """The oracle's confusion reads the routed policy's stored choices: an evaluation run again over stored episodes (a fresh
    routed policy that played nothing) stores the same choices, not none."""
    import asyncio

    from router_helpers import OpeningsScorer

    from gapforge.agents.router import RoutedPolicy, Router, RoutingConfig, make_options
    from gapforge.envs.registry import make_env
    from gapforge.evaluation.run import EvalPlan, evaluate

    tasks = ["shop-lookup-001", "shop-refusal-001"]
    env = make_env("shop")
    opening = next(m.content for m in env.reset(tasks[1]) if m.role == "user")
    router = Router(
        make_options([{"name": "pv", "adapter": "pv"}], RoutingConfig().labels),
        OpeningsScorer([[opening]]),
        RoutingConfig(),
    )
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store.create_run("trace", {}, run_id="r2")
        stored = []
        for _ in range(2):
            base = _Says("base")
            policies = {
                "base": base,
                "trace_routed": RoutedPolicy(router, base, {"pv": _Says("adapter:pv")}),
                "adapter:pv": _Says("adapter:pv"),
            }
            plan = EvalPlan(run, "shop", tasks, trials=1, max_turns=1, n_boot=20)
            asyncio.run(
                evaluate(
                    store,
                    plan,
                    make_env=lambda: make_env("shop"),
                    policies=policies,
                    families={t: env.task_family(t) for t in tasks},
                )
            )
            stored.append(
                {t: d["adapter"] for t, d in store.get_evaluation(run, "eval:trace_routed").metrics["routing"].items()}
            )
    assert stored[0] == stored[1] == {"shop-lookup-001": None, "shop-refusal-001": "pv"}
