"""What was evaluated is what is served: a small real run (tiny model, random adapters, the example synthetic envs
in the Docker sandbox, routing.backend=gate: trained on the example envs' openings read in the sandbox) gets its
router built by the graph's stage, is evaluated by `gapforge evaluate RUN` with no setting but where it works, and is
then served from its stored config alone: every held-out task played through the running server is routed exactly
as the evaluation stored it, and serving reads the router from the store (a sandbox image that does not exist changes
nothing)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def evaluated(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, sandbox_image: str
) -> tuple[Path, str, dict]:
    """(workspace, run, {held-out task: the routing decision the evaluation stored}) after `gapforge evaluate RUN`
    with no setting but where it works."""
    workspace = tmp_path_factory.mktemp("served") / "ws"
    workspace.mkdir()
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
    return workspace, run, evaluated


def _post_heldout(base_url: str, evaluated: dict) -> None:
    """Every held-out task played through the routed server at `base_url` is routed as the evaluation stored it."""
    from gapforge.serving.routed_server import ROUTED_MODEL

    shop = make_env("shop")
    for task in HELDOUT:
        messages = [m.to_openai() for m in shop.reset(task)]
        body = {"model": ROUTED_MODEL, "messages": messages, "tools": shop.tools(), "max_tokens": 2}
        answer = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["gapforge"]["decision"] == evaluated[task], task


def _routes_as_evaluated(chat: Any, router: Any, evaluated: dict) -> None:
    """Every held-out task played through a running routed server is routed as the evaluation stored it."""
    from gapforge.serving.routed_server import RoutedApp
    from tests.fakes.routed_server import RoutedServer

    with RoutedServer(RoutedApp(chat, router.route_messages)) as server:
        _post_heldout(server.base_url, evaluated)


def test_the_served_router_routes_every_heldout_task_as_the_evaluation_did(
    evaluated: tuple[Path, str, dict], tiny_model_dir: Path
) -> None:
    from gapforge.cli_serve import served

    workspace, run, decisions = evaluated
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
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
    _routes_as_evaluated(chat, router, decisions)


def test_an_exported_bundle_served_through_vllm_routes_as_the_evaluation_did(
    evaluated: tuple[Path, str, dict], tiny_model_dir: Path, tmp_path: Path
) -> None:
    """`gapforge export`, then the bundle's serve.sh run as a user runs it (`vllm` on PATH: the vLLM stand-in): it
    starts vLLM with every adapter under gapforge's names, waits for it, serves the router in front of it from the
    bundle alone (the run's store moved away), and stops vLLM when it ends."""
    import os
    import re
    import signal
    import socket
    import subprocess
    import sys
    import time

    workspace, run, decisions = evaluated
    out = tmp_path / "bundle"
    res = CliRunner().invoke(
        app, ["export", run, str(out), "--trl", "--set", f"workspace={workspace}"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 0, res.output
    for cap in CAPS:  # each synthetic env as a TRL env, its rows read in the sandbox (tests/training/test_trl_envs.py)
        assert len((out / "trl" / cap / "dataset.jsonl").read_text().splitlines()) == 6
    router_json = json.loads((out / "router" / "router.json").read_text())
    gate = router_json["router"]["gate"]
    assert gate["examples"] == [] and router_json["router"]["openings"] is None  # no analysis-split or env text
    report = CliRunner().invoke(app, ["report", run, "--set", f"workspace={workspace}"])
    assert report.exit_code == 0, report.output
    rows = (workspace / "reports" / run / "report.md").read_text().splitlines()
    card = (out / "adapters" / CAPS[0] / "README.md").read_text()
    quoted = [line for line in card.splitlines() if line.startswith(("| trace_routed |", f"| adapter:{CAPS[0]} |"))]
    assert quoted and all(line in rows for line in quoted)  # the model card carries the report's numbers

    # serve.sh as a user runs it: `vllm` (here the stand-in) and `gapforge` on PATH, the run's store moved away
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    root = Path(__file__).resolve().parents[2]
    (bin_dir / "vllm").write_text(f'#!/bin/sh\nshift\nexec {sys.executable} -m tests.fakes.vllm_standin "$@"\n')
    (bin_dir / "vllm").chmod(0o755)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        vllm_port = free.getsockname()[1]
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(root),
        "BASE_DIR": str(tiny_model_dir),
        "VLLM_PORT": str(vllm_port),
        "GAPFORGE_WORKSPACE": str(tmp_path / "elsewhere"),
    }
    script = (out / "serve.sh").read_text()
    assert re.search(r"--lora-modules \S+-[0-9a-f]{12}=", script) and "--chat-template" in script
    (workspace / "gapforge.db").rename(workspace / "moved.db")  # served from the bundle alone
    proc = subprocess.Popen(
        ["sh", str(out / "serve.sh"), "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        deadline, url = time.monotonic() + 300, None
        while url is None:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "serve.sh ended before gapforge served"
            assert time.monotonic() < deadline, "serve.sh did not come up"
            if line.startswith("serving run "):  # gapforge's line, after the stand-in's own `serving NAME on URL`
                url = re.search(r"on (http://\S+/v1)", line).group(1)
        _post_heldout(url, decisions)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # as Ctrl-C would: gapforge drains, the script's trap stops vLLM
        proc.wait(timeout=60)
        (workspace / "moved.db").rename(workspace / "gapforge.db")
    with socket.socket() as probe:  # vLLM stopped with the script
        assert probe.connect_ex(("127.0.0.1", vllm_port)) != 0
