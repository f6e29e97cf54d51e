"""Paired evaluation on shop: more trials on one family for base and TRACE only (the other
policies pair on the trials both played), resumable growth of the trial count, and the
routed policy reusing the base's episodes of the tasks it routes to the base — checked
against actually playing it with the tiny local model (common random numbers)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from router_helpers import random_adapter

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.agents.router import LabelScorer, RoutedPolicy, Router, RoutingConfig, first_user_message, make_options
from gapforge.envs.protocol import Message
from gapforge.envs.registry import make_env
from gapforge.envs.sampling import episode_key
from gapforge.evaluation.config import EvaluationConfig
from gapforge.evaluation.run import EvalPlan, evaluate
from gapforge.store import Store

ADAPTER_TASK, NONE_TASK, ABSTAIN_TASK = "shop-lookup-001", "shop-refusal-001", "shop-write-001"
TASKS = [ADAPTER_TASK, "shop-lookup-002", NONE_TASK, ABSTAIN_TASK]
FAMILIES = {t: make_env("shop").task_family(t) for t in TASKS}


class KeywordScorer(LabelScorer):
    """A LabelScorer stand-in: 'tracking' -> A clearly; 'cancel an order' -> A by less than the margin (abstain); else none (C)."""

    def label_token_ids(self, label: str) -> list[int]:
        return [ord(c) for c in label]

    def render(self, messages: list[dict[str, Any]]) -> str:
        return messages[0]["content"].split('"""')[-2].lower()

    def label_logprobs(self, prompts: list[str], token_ids: list[int]) -> list[list[float]]:
        return [
            [-0.1, -9.0, -3.0]
            if "tracking" in p
            else [-1.0, -9.0, -1.5]
            if "cancel an order" in p
            else [-4.0, -9.0, -0.1]
            for p in prompts
        ]


def keyword_router() -> Router:
    capabilities = [
        {"name": "precondition_verification", "adapter": "pv"},
        {"name": "structured_data_reasoning", "adapter": "sdr"},
    ]
    options = make_options(capabilities, RoutingConfig().labels)
    return Router(options, KeywordScorer(), RoutingConfig(margin=1.0))


class Scripted:
    """A PolicyModel that answers from the episode key and records every call's key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[str | None] = []

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        self.calls.append(episode_key.get())
        return Message.assistant(f"{self.name} says {episode_key.get()}")


def _keys(store: Store, run: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, s in sorted(store.episode_keys(run, "shop")):
        out.setdefault(t, []).append(s)
    return out


def test_family_trials_for_base_and_trace_only_and_pairs_on_common_trials(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        run_id = store.create_run("trace", {"env": "shop"})
        base, pv = Scripted("base"), Scripted("adapter:pv")
        policies = {
            "base": base,
            "trace_routed": RoutedPolicy(keyword_router(), base, {"pv": pv}),
            "adapter:pv": Scripted("adapter:pv"),
        }
        plan = EvalPlan(run_id, "shop", TASKS, trials=2, max_turns=1, n_boot=100, concurrency=2)
        first = asyncio.run(
            evaluate(store, plan, make_env=lambda: make_env("shop"), policies=policies, families=FAMILIES)
        )
        base_ids = {(e.task_id, e.sample): e.id for e in store.episodes(first.get("base").child_run)}
        # more trials on lookup_and_answer: collecting again adds only the missing samples
        plan = EvalPlan(
            run_id,
            "shop",
            TASKS,
            trials=2,
            max_turns=1,
            n_boot=100,
            concurrency=2,
            family_trials={"lookup_and_answer": 5},
            focus_family="lookup_and_answer",
        )
        result = asyncio.run(
            evaluate(store, plan, make_env=lambda: make_env("shop"), policies=policies, families=FAMILIES)
        )
        five, two = [0, 1, 2, 3, 4], [0, 1]
        wanted = {ADAPTER_TASK: five, "shop-lookup-002": five, NONE_TASK: two, ABSTAIN_TASK: two}
        assert _keys(store, result.get("base").child_run) == wanted
        assert _keys(store, result.get("trace_routed").child_run) == wanted
        assert _keys(store, result.get("adapter:pv").child_run) == {t: two for t in TASKS}
        assert {
            (e.task_id, e.sample): e.id for e in store.episodes(result.get("base").child_run) if e.sample < 2
        } == base_ids
        m = {p.name: p.metrics for p in result.policies}
        assert (
            m["base"]["trials_by_family"]
            == m["trace_routed"]["trials_by_family"]
            == {"lookup_and_answer": 5, "policy_refusal": 2, "single_write": 2}
        )
        assert m["adapter:pv"]["trials_by_family"] == {"lookup_and_answer": 2, "policy_refusal": 2, "single_write": 2}
        assert m["trace_routed"]["focus_family"] == "lookup_and_answer" and m["base"]["episodes"] == 14
        assert m["base"]["vs_base_paired"] is None and m["base"]["vs_base_by_family"] is None
        assert (m["adapter:pv"]["vs_base_paired"]["episodes"], m["adapter:pv"]["vs_base_paired"]["tasks"]) == (
            8,
            4,
        )  # only the common pairs
        assert m["adapter:pv"]["vs_base_by_family"]["lookup_and_answer"]["episodes"] == 4
        assert m["trace_routed"]["vs_base_paired"]["episodes"] == 14
        assert m["trace_routed"]["vs_base_by_family"]["lookup_and_answer"]["episodes"] == 10
        # the routed policy played only the tasks routed to an adapter; the others are the base's episodes, copied
        assert m["trace_routed"]["reused_base_tasks"] == [NONE_TASK, ABSTAIN_TASK]
        assert sorted(pv.calls) == [f"{t}#{s}" for t in (ADAPTER_TASK, "shop-lookup-002") for s in five]
        assert len(base.calls) == 14  # base played each of its episodes once; the routed policy never called it
        routing = m["trace_routed"]["routing"]
        assert (
            routing[ADAPTER_TASK]["adapter"] == "pv"
            and routing[NONE_TASK]["adapter"] is None
            and routing[ABSTAIN_TASK]["abstained"] is True
        )
        routed_rows = {(e.task_id, e.sample): e for e in store.episodes(result.get("trace_routed").child_run)}
        for e in store.episodes(result.get("base").child_run):
            if e.task_id in (NONE_TASK, ABSTAIN_TASK):
                r = routed_rows[(e.task_id, e.sample)]
                assert (r.messages, r.reward, r.success, r.policy) == (e.messages, e.reward, e.success, "base")
        assert {r.policy for (t, _), r in routed_rows.items() if FAMILIES[t] == "lookup_and_answer"} == {"trace_routed"}
    finally:
        store.close()


class Waits(Scripted):
    """Answers only once `other` has answered at least once (a policy played strictly after `other` would hang)."""

    def __init__(self, name: str, started: asyncio.Event, other: asyncio.Event) -> None:
        super().__init__(name)
        self.started, self.other = started, other

    async def respond(self, messages, tools, *, temperature=None) -> Message:
        self.started.set()
        await self.other.wait()
        return await super().respond(messages, tools, temperature=temperature)


def test_policies_that_do_not_reuse_the_base_play_at_the_same_time_as_it(tmp_path: Path) -> None:
    """The base and an adapter each wait for the other's first call: both finish only if they play at once.
    The routed policy, which reuses the base's episodes, starts after the base is done."""
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    done: list[str] = []

    async def run() -> Any:
        base_started, pv_started = asyncio.Event(), asyncio.Event()
        base, pv = Waits("base", base_started, pv_started), Waits("adapter:pv", pv_started, base_started)
        routed = RoutedPolicy(keyword_router(), base, {"pv": Scripted("pv")})
        policies = {"base": base, "trace_routed": routed, "adapter:pv": pv}
        plan = EvalPlan(run_id, "shop", TASKS, trials=1, max_turns=1, n_boot=50, concurrency=2)
        return await asyncio.wait_for(
            evaluate(
                store,
                plan,
                make_env=lambda: make_env("shop"),
                policies=policies,
                families=FAMILIES,
                on_policy_done=done.append,
            ),
            timeout=60,
        )

    try:
        run_id = store.create_run("trace", {"env": "shop"})
        result = asyncio.run(run())
        assert sorted(done[:2]) == ["adapter:pv", "base"] and done[2] == "trace_routed"
        assert [p.name for p in result.policies] == [
            "base",
            "trace_routed",
            "adapter:pv",
        ]  # metrics in the caller's order
        assert result.get("adapter:pv").metrics["episodes"] == result.get("base").metrics["episodes"] == len(TASKS)
    finally:
        store.close()


def test_policies_play_one_after_the_other_when_not_together(tmp_path: Path) -> None:
    """together=False (the evaluation stage on Ray, where each policy's player starts its own actors)."""
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    calls: list[str] = []

    class Logged(Scripted):
        async def respond(self, messages, tools, *, temperature=None) -> Message:
            calls.append(self.name)
            await asyncio.sleep(0)  # let any other policy in
            return await super().respond(messages, tools, temperature=temperature)

    try:
        run_id = store.create_run("trace", {"env": "shop"})
        policies = {
            "base": Logged("base"),
            "adapter:pv": Logged("adapter:pv"),
            "capability_hints": Logged("capability_hints"),
        }
        plan = EvalPlan(run_id, "shop", TASKS, trials=1, max_turns=1, n_boot=50, concurrency=2)
        asyncio.run(
            evaluate(
                store, plan, make_env=lambda: make_env("shop"), policies=policies, families=FAMILIES, together=False
            )
        )
        assert calls == ["base"] * len(TASKS) + ["adapter:pv"] * len(TASKS) + ["capability_hints"] * len(TASKS)
        calls.clear()
        plan = EvalPlan(f"{run_id}", "shop", TASKS, trials=2, max_turns=1, n_boot=50, concurrency=2)
        asyncio.run(
            evaluate(store, plan, make_env=lambda: make_env("shop"), policies=policies, families=FAMILIES)
        )  # together
        assert len(calls) == 3 * len(TASKS) and calls != sorted(
            calls, key=["base", "adapter:pv", "capability_hints"].index
        )
    finally:
        store.close()


def test_config_and_plan_reject_bad_trial_counts() -> None:
    assert EvaluationConfig().family_trials == {} and EvaluationConfig().family_trials_policies == [
        "base",
        "trace_routed",
        "baseline_grpo_target",
    ]
    with pytest.raises(ValueError, match=r"family_trials\['refusal'\] = 0: use 1..512 trials per task"):
        EvaluationConfig(family_trials={"refusal": 0})
    with pytest.raises(ValueError, match="1..512"):
        EvaluationConfig(family_trials={"refusal": 513})
    with pytest.raises(ValueError, match="trials must be >= 1, got 0"):
        EvalPlan("r", "shop", TASKS, trials=0)
    with pytest.raises(ValueError, match=r"family_trials\['x'\] = 600"):
        EvalPlan("r", "shop", TASKS, family_trials={"x": 600})
    plan = EvalPlan("r", "shop", TASKS, focus_family="lookup")
    with pytest.raises(
        ValueError,
        match="family 'lookup' .* has no task here: use one of lookup_and_answer, policy_refusal, single_write",
    ):
        asyncio.run(
            evaluate(
                None, plan, make_env=lambda: make_env("shop"), policies={"base": Scripted("base")}, families=FAMILIES
            )
        )


@pytest.mark.slow
@pytest.mark.parametrize("adapters_alone", [False, True], ids=["base-only", "adapters-alone-too"])
def test_reused_episodes_equal_playing_the_routed_policy(
    tiny_model_dir: Path, tmp_path: Path, adapters_alone: bool
) -> None:
    """Copied episodes are what playing the routed policy gives: the base's where it routes to the base, and (when
    each adapter is evaluated alone too) the adapter's where it routes to that adapter."""
    from gapforge.evaluation.reuse import played as played_count
    from gapforge.serving.multi_adapter import MultiAdapterModel

    adapters = {
        "pv": random_adapter(tiny_model_dir, tmp_path / "pv", seed=3),
        "sdr": random_adapter(tiny_model_dir, tmp_path / "sdr", seed=4),
    }
    backend = MultiAdapterModel(tiny_model_dir, adapters, max_new_tokens=8, name="tiny-base")
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        run_id = store.create_run("trace", {"env": "shop"})
        base = backend.policy(None, temperature=1.0, name="base")
        per_adapter = {a: backend.policy(a, temperature=1.0, name=f"adapter:{a}") for a in adapters}
        policies = {"base": base, "trace_routed": RoutedPolicy(keyword_router(), base, per_adapter)}
        if adapters_alone:
            policies |= {f"adapter:{a}": p for a, p in per_adapter.items()}
        tasks = [ADAPTER_TASK, NONE_TASK, ABSTAIN_TASK]
        plan = EvalPlan(run_id, "shop", tasks, trials=2, max_turns=2, n_boot=100, concurrency=1)
        result = asyncio.run(
            evaluate(store, plan, make_env=lambda: make_env("shop"), policies=policies, families=FAMILIES)
        )
        assert result.get("trace_routed").metrics["reused_base_tasks"] == [NONE_TASK, ABSTAIN_TASK]
        reused = {(e.task_id, e.sample): e for e in store.episodes(result.get("trace_routed").child_run)}
        # play the routed policy for real (a fresh one: nothing cached) into another run
        played_run = store.create_run("evaluation", {"check": "played"})
        fresh = RoutedPolicy(keyword_router(), base, per_adapter)
        asyncio.run(
            collect(
                CollectPlan(played_run, "shop", tasks, 2, 1, 2, None),
                make_env=lambda: make_env("shop"),
                policy=fresh,
                sink=store,
            )
        )
        played = {(e.task_id, e.sample): e for e in store.episodes(played_run)}
        assert set(played) == set(reused)
        for key, p in played.items():
            r = reused[key]
            assert (r.messages, r.reward, r.success, r.turns, r.termination) == (
                p.messages,
                p.reward,
                p.success,
                p.turns,
                p.termination,
            ), key
        assert (
            reused[(NONE_TASK, 0)].messages != reused[(NONE_TASK, 1)].messages
        )  # sampled: equal only through the shared seeds
        assert {reused[k].policy for k in reused if k[0] != ADAPTER_TASK} == {"base"}
        chosen = fresh.decisions[first_user_message(reused[(ADAPTER_TASK, 0)].messages)].adapter
        copied_from = {reused[k].policy for k in reused if k[0] == ADAPTER_TASK}
        assert copied_from == ({f"adapter:{chosen}"} if adapters_alone else {"trace_routed"})
        routed_metrics = result.get("trace_routed").metrics
        assert routed_metrics["reused_episodes"] == (6 if adapters_alone else 4)
        assert played_count(routed_metrics) == (0 if adapters_alone else 2)
        refusal = result.get("trace_routed").metrics["vs_base_by_family"]["policy_refusal"]
        tied = 1 - 0.025 ** (1 / refusal["episodes"])  # every pair ties (the base's own episodes): bounded, not [0, 0]
        assert refusal["pass_rate"] == pytest.approx({"value": 0.0, "low": -tied, "high": tied})
    finally:
        store.close()
        asyncio.run(backend.aclose())
