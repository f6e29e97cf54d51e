"""Evaluation episodes on Ray: the base and an adapter play on the rollout actors (rebuilt
there from the base weights and the adapters' bytes) and store the same episodes and metrics as locally;
the routed policy plays on the driver, where its routing decisions are recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from router_helpers import capability_specs, random_adapter, shared_taught_model

from agents.router import Router, RoutingConfig, make_options
from agents.router_backends import TransformersScorer
from envs.registry import make_env
from evaluation.policies import standard_policies
from evaluation.run import EvalPlan, child_run_id, evaluate
from executor import ExecutorConfig
from executor.evaluation import eval_players, recipe
from serving.multi_adapter import MultiAdapterModel
from store import Store

pytestmark = pytest.mark.slow  # plays a tiny model
TASKS = ["shop-refusal-001", "shop-lookup-001"]
PLAYED = ("base", "trace_routed", "adapter:precondition_verification")  # a subset: each remote policy starts its actor


def test_evaluation_on_ray_stores_the_local_episodes_and_metrics(ray_cluster, tiny_model_dir: Path, tmp_path_factory, tmp_path) -> None:
    taught = shared_taught_model(tmp_path_factory, tiny_model_dir)
    caps = capability_specs()
    paths = {c["name"]: random_adapter(taught, tmp_path / c["name"], seed=20 + i) for i, c in enumerate(caps)}
    backend = MultiAdapterModel(taught, paths, max_new_tokens=8, seed=0)
    router = Router(make_options(caps, RoutingConfig().labels), TransformersScorer(backend.model, backend.tokenizer, context=backend.base_context))
    store = Store(f"sqlite:///{tmp_path / 'gapforge.db'}")
    runs = {where: store.create_run("trace", {"env": "shop"}) for where in ("local", "ray")}
    shop = lambda: make_env("shop")  # noqa: E731
    players = eval_players(ExecutorConfig(kind="ray", rollout_workers=1, worker_dir=str(tmp_path / "worker")),
                           recipe(taught, paths, caps, list(paths), None, temperature=1.0, max_new_tokens=8, seed=0,
                                  worker_dir=str(tmp_path / "worker")), shop, 4)

    async def both() -> dict:
        out = {}
        for where, run_id in runs.items():
            every = standard_policies(backend, router, caps, temperature=1.0, capability_adapters=list(paths))
            policies = {n: every[n] for n in PLAYED}
            plan = EvalPlan(run_id, "shop", TASKS, trials=2, max_turns=3, temperature=1.0, concurrency=4)
            out[where] = await evaluate(store, plan, make_env=shop, policies=policies, families={t: "f" for t in TASKS},
                                        players=players if where == "ray" else None)
        await backend.aclose()
        return out

    results = asyncio.run(both())
    names = [p.name for p in results["local"].policies]
    assert set(names) == set(PLAYED)
    for name in names:
        local, remote = (sorted(store.episodes(child_run_id(runs[w], name)), key=lambda e: (e.task_id, e.sample)) for w in ("local", "ray"))
        assert [(e.task_id, e.sample, e.messages, e.reward) for e in remote] == [(e.task_id, e.sample, e.messages, e.reward) for e in local], name
        keep = ("pass_rate", "mean_reward", "vs_base_paired", "routing")
        assert {k: v for k, v in results["ray"].get(name).metrics.items() if k in keep} == \
               {k: v for k, v in results["local"].get(name).metrics.items() if k in keep}, name
    base, adapter = (sorted(store.episodes(child_run_id(runs["ray"], n)), key=lambda e: (e.task_id, e.sample))
                     for n in ("base", f"adapter:{caps[0]['name']}"))
    assert [e.messages for e in base] != [e.messages for e in adapter]  # the adapter really changed the policy on the worker
    assert results["ray"].get("trace_routed").metrics["routing"]  # decided and recorded on the driver
    store.close()
