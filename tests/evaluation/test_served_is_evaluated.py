"""What was evaluated is what is served: a small real run (tiny model, random adapters, the example synthetic envs
in the Docker sandbox, routing.backend=gate: trained on the example envs' openings read in the sandbox) gets its
router built by the graph's stage, is evaluated by `gapforge evaluate RUN` with no setting but where it works, and is
then served from its stored config alone: every held-out task played through the running server is routed exactly
as the evaluation stored it, and serving reads the router from the store (a sandbox image that does not exist changes
nothing)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from router_helpers import store_trained_capabilities
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.envs.registry import make_env
from gapforge.run_config import resolve
from gapforge.run_session import RunOptions, create_run
from gapforge.stages import open_stages
from gapforge.store import Store

pytestmark = pytest.mark.docker

CAPS = ["precondition_verification", "structured_data_reasoning"]
HELDOUT = ["shop-refusal-001", "shop-refusal-003", "shop-lookup-001", "shop-compound-007", "shop-write-001"]
TAG = "gapforge-sandbox:latest"


@pytest.fixture(scope="module")
def sandbox_image(docker_client) -> str:
    from gapforge.sandbox.image import build_image, image_is_current

    if not image_is_current(docker_client, TAG):
        build_image(docker_client, TAG, method="local-python")
    return TAG


def _run(workspace: Path, tiny_model_dir: Path, image: str) -> str:
    """A graph run's stored config, its retained capabilities with adapters and accepted envs, and its held-out split."""
    cfg = load_config(
        None,
        [
            f"workspace={workspace}",
            "policy.kind=local",
            f"policy.local_path={tiny_model_dir}",
            "policy.max_new_tokens=4",
            "rollouts.max_turns=1",
            "routing.backend=gate",
            "routing.gate.max_tokens=64",
            "training.train_seeds=6",
            "evaluation.trials=1",
            "evaluation.family_trials.policy_refusal=2",
            "evaluation.focus_family=policy_refusal",
            "evaluation.routing_seeds=2",
            "evaluation.comparisons=[]",
            f"sandbox.image={image}",
            "sandbox.pool_size=1",
            "sandbox.memory_mb=256",
        ],
        environ={},
    )
    with Store(cfg.store_url) as store:
        run = create_run(store, "trace", "run", cfg, RunOptions())
        store_trained_capabilities(store, run, workspace, tiny_model_dir, CAPS)
        shop = make_env("shop")
        store.put_split(
            run,
            env="shop",
            seed=0,
            fraction=0.5,
            analysis_tasks=["shop-refusal-002"],
            heldout_tasks=HELDOUT,
            families={t: shop.task_family(t) for t in [*HELDOUT, "shop-refusal-002"]},
        )

        async def build_router() -> None:  # the graph's build_router node's call
            async with open_stages(cfg, store) as stages:
                await stages.build_router(run, CAPS)

        asyncio.run(build_router())
    return run


def test_the_served_router_routes_every_heldout_task_as_the_evaluation_did(
    workspace: Path, tiny_model_dir: Path, sandbox_image: str
) -> None:
    from gapforge.cli_serve import served
    from gapforge.serving.routed_server import ROUTED_MODEL, RoutedApp, RoutedServer

    run = _run(workspace, tiny_model_dir, sandbox_image)
    where = [
        "--set",
        f"workspace={workspace}",
        "--set",
        "executor.local_rollout_workers=1",
    ]  # where it works: never the run's
    res = CliRunner().invoke(app, ["evaluate", run, *where], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "override:" not in res.output and "family_trials {'policy_refusal': 2}" in res.output
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        base = store.get_evaluation(run, "eval:base").metrics
        evaluated = store.get_evaluation(run, "eval:trace_routed").metrics["routing"]
        assert (
            base["trials_by_family"]["policy_refusal"] == 2 and base["focus_family"] == "policy_refusal"
        )  # the run's evaluation section
        assert sorted(evaluated) == sorted(HELDOUT)
        chosen = [evaluated[t]["adapter"] for t in HELDOUT]
        assert set(chosen) <= {*CAPS, None} and any(chosen)  # the gate routes some held-out tasks to an adapter
        assert store.get_evaluation(run, "router").metrics["gate"] is not None  # the trained gate, stored with the run

        # `gapforge serve RUN` with no flags: the run's config; a sandbox image that does not exist shows no container is needed
        where_cfg = load_config(None, [f"workspace={workspace}"], environ={})
        resolved = resolve(
            dict(store.get_run(run).config), run, where_cfg, None, ["sandbox.image=gapforge-no-such-image:none"]
        )
        assert [k for k, _, _ in resolved.overridden] == ["sandbox.image"]
        cfg = resolved.cfg
        assert cfg.routing.backend == "gate" and cfg.policy.local_path == str(tiny_model_dir)
        artifacts, chat, router, source = served(cfg, store, run)
        assert source == "stored" and [c["name"] for c in artifacts.capabilities] == CAPS

    shop = make_env("shop")
    with RoutedServer(RoutedApp(chat, router.route_messages)) as server:
        for task in HELDOUT:
            messages = [m.to_openai() for m in shop.reset(task)]
            body = {"model": ROUTED_MODEL, "messages": messages, "tools": shop.tools(), "max_tokens": 2}
            answer = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            assert answer.json()["gapforge"]["decision"] == evaluated[task], task
