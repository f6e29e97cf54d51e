"""Evaluation end to end, offline on shop: base vs TRACE (routed) vs each adapter vs both
baselines with the taught tiny model; numbers with intervals stored; resumable; router
accuracy stored; the report written with its plots."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from router_helpers import (
    capability_specs,
    first_messages,
    random_adapter,
    shared_taught_model,
)

from gapforge.agents.prompted_policy import HintedPolicy
from gapforge.agents.router import Router, RoutingConfig, TransformersScorer, make_options
from gapforge.envs.protocol import Message
from gapforge.envs.registry import make_env
from gapforge.evaluation.policies import GRPO_TARGET, standard_policies
from gapforge.evaluation.report import write_report
from gapforge.evaluation.routing import RoutingCase, measure_router, routing_cases
from gapforge.evaluation.run import EvalPlan, evaluate
from gapforge.serving.multi_adapter import MultiAdapterModel
from gapforge.store import Store

TASKS = ["shop-refusal-001", "shop-lookup-001"]


@pytest.fixture(scope="module")
def setup(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    taught = shared_taught_model(tmp_path_factory, tiny_model_dir)
    root = tmp_path_factory.mktemp("eval-adapters")
    names = ["precondition_verification", "structured_data_reasoning", GRPO_TARGET]
    paths = {n: random_adapter(taught, root / n, seed=10 + i) for i, n in enumerate(names)}
    backend = MultiAdapterModel(taught, paths, max_new_tokens=8, name="tiny-base")
    router = Router(
        make_options(capability_specs(), RoutingConfig().labels),
        TransformersScorer(backend.model, backend.tokenizer, context=backend.base_context),
    )
    store = Store(f"sqlite:///{root / 'gapforge.db'}")
    run_id = store.create_run("trace", {"env": "shop"})
    for c in capability_specs():
        store.put_capability(run_id, c["name"], definition=c["definition"])
        store.put_adapter(
            run_id,
            c["name"],
            path=str(paths[c["name"]]),
            metrics={"curve": [{"step": 0, "reward": 0.2}, {"step": 5, "reward": 0.5}], "best_step": 5},
            status="trained",
            capability=c["name"],
        )
    yield backend, router, store, run_id, root
    store.close()


def test_evaluates_every_policy_with_intervals_and_resumes(setup) -> None:
    backend, router, store, run_id, _root = setup
    env = make_env("shop")
    families = {t: env.task_family(t) for t in TASKS}
    # the backend holds GRPO_TARGET's adapter: the GRPO-on-target comparison adds its policy (evaluation.comparisons)
    policies = standard_policies(backend, router, capability_specs(), temperature=1.0)
    assert set(policies) == {
        "base",
        "trace_routed",
        "adapter:precondition_verification",
        "adapter:structured_data_reasoning",
        "capability_hints",
        GRPO_TARGET,
    }
    plan = EvalPlan(run_id, "shop", TASKS, trials=2, max_turns=2, n_boot=200)
    result = asyncio.run(evaluate(store, plan, make_env=lambda: make_env("shop"), policies=policies, families=families))
    stored = {e.name: e for e in store.evaluations(run_id)}
    assert set(stored) == {f"eval:{n}" for n in policies}
    for name in policies:
        m = stored[f"eval:{name}"].metrics
        assert m["episodes"] == 4 and m["tasks"] == 2 and set(m["by_family"]) == {"policy_refusal", "lookup_and_answer"}
        for key in ("pass_rate", "mean_reward"):
            assert m[key]["low"] <= m[key]["value"] <= m[key]["high"]
        assert set(m["pass_hat_k"]) == {"1", "2"}
        assert (m["vs_base"] is None) == (name == "base")
        assert len(store.episodes(m["child_run"], env="shop")) == 4
    routing = stored["eval:trace_routed"].metrics["routing"]
    assert set(routing) == set(TASKS) and all("label" in d for d in routing.values())
    assert stored["eval:capability_hints"].metrics["prompt"].startswith("capability_hints@")
    # the hinted baseline's policy sees the capability descriptions in its system prompt (the env's messages stay as they are)
    seen: list[list[Message]] = []

    class Recorder:
        name = "rec"

        async def respond(self, messages, tools, *, temperature=None):
            seen.append(messages)
            return Message.assistant("ok")

    hinted = HintedPolicy(Recorder(), capability_specs())
    asyncio.run(hinted.respond([Message.system("policy"), Message.user("hi")], []))
    assert (
        seen[0][0].content.startswith("policy")
        and "precondition_verification: Check order status" in seen[0][0].content
    )
    # resume: a second evaluation runs no new episode and stores the same numbers
    before = {n: store.episodes(result.get(n).child_run) for n in policies}
    again = asyncio.run(evaluate(store, plan, make_env=lambda: make_env("shop"), policies=policies, families=families))
    assert {n: [e.id for e in store.episodes(again.get(n).child_run)] for n in policies} == {
        n: [e.id for e in v] for n, v in before.items()
    }
    assert again.get("base").metrics["pass_rate"] == result.get("base").metrics["pass_rate"]


def test_router_accuracy_is_stored_and_the_report_is_written(setup) -> None:
    _backend, router, store, run_id, root = setup
    msgs = first_messages()
    cases = [RoutingCase(m, "precondition_verification", "synthetic") for m in msgs["A"]]
    cases += [RoutingCase(m, "structured_data_reasoning", "synthetic") for m in msgs["B"]]
    cases += [RoutingCase(m, "none", "target") for m in msgs["C"]]
    acc = measure_router(router, cases, store=store, run_id=run_id)
    assert acc.accuracy == 1.0 and acc.matrix == [[2, 0, 0], [0, 2, 0], [0, 0, 2]]
    assert store.get_evaluation(run_id, "router_accuracy").metrics["accuracy"] == 1.0
    target_cases = routing_cases({}, [], target=lambda: make_env("shop"), none_tasks=["shop-lookup-002"])
    assert target_cases[0].expected == "none" and target_cases[0].first_message
    report = write_report(store, run_id, root / "report")
    text = report.path.read_text()
    assert "router_confusion.png" in text and "adapter_heldout.png" in text and "| base |" in text
    assert {p.name for p in report.plots} >= {"router_confusion.png", "adapter_heldout.png"}
    assert all(p.stat().st_size > 1000 for p in report.plots)
