"""Evaluation episodes on Ray: the base and an adapter play on the rollout actors (rebuilt
there from the base weights and the adapters' bytes) and store the same episodes and metrics as locally;
the routed policy plays on the driver, where its routing decisions are recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from executor_helpers import assert_same_evaluation, evaluate_each, sorted_episodes
from router_helpers import capability_specs, random_adapter, shared_taught_model

from gapforge.agents.router import Router, RoutingConfig, TransformersScorer, make_options
from gapforge.envs.registry import make_env
from gapforge.executor import ExecutorConfig
from gapforge.executor.evaluation import eval_players, recipe
from gapforge.serving.multi_adapter import MultiAdapterModel
from gapforge.store import Store

pytestmark = pytest.mark.slow  # plays a tiny model
TASKS = ["shop-refusal-001", "shop-lookup-001"]
PLAYED = ("base", "trace_routed", "adapter:precondition_verification")  # a subset: each remote policy starts its actor


def test_evaluation_on_ray_stores_the_local_episodes_and_metrics(
    ray_cluster, tiny_model_dir: Path, tmp_path_factory, tmp_path
) -> None:
    taught = shared_taught_model(tmp_path_factory, tiny_model_dir)
    caps = capability_specs()
    paths = {c["name"]: random_adapter(taught, tmp_path / c["name"], seed=20 + i) for i, c in enumerate(caps)}
    backend = MultiAdapterModel(taught, paths, max_new_tokens=8, seed=0)
    router = Router(
        make_options(caps, RoutingConfig().labels),
        TransformersScorer(backend.model, backend.tokenizer, context=backend.base_context),
    )
    store = Store(f"sqlite:///{tmp_path / 'gapforge.db'}")
    runs = {where: store.create_run("trace", {"env": "shop"}) for where in ("local", "ray")}
    shop = lambda: make_env("shop")  # noqa: E731
    players = eval_players(
        ExecutorConfig(kind="ray", rollout_workers=1, worker_dir=str(tmp_path / "worker")),
        recipe(
            taught,
            paths,
            caps,
            list(paths),
            temperature=1.0,
            max_new_tokens=8,
            seed=0,
            worker_dir=str(tmp_path / "worker"),
        ),
        shop,
        4,
    )

    async def both() -> dict:
        out = await evaluate_each(store, runs, backend, router, caps, list(paths), PLAYED, TASKS, shop, players, "ray")
        await backend.aclose()
        return out

    results = asyncio.run(both())
    assert {p.name for p in results["local"].policies} == set(PLAYED)
    assert_same_evaluation(store, runs, results, PLAYED, ("pass_rate", "mean_reward", "vs_base_paired", "routing"))
    base, adapter = (sorted_episodes(store, runs["ray"], n) for n in ("base", f"adapter:{caps[0]['name']}"))
    assert [e.messages for e in base] != [
        e.messages for e in adapter
    ]  # the adapter really changed the policy on the worker
    assert results["ray"].get("trace_routed").metrics["routing"]  # decided and recorded on the driver
    store.close()
