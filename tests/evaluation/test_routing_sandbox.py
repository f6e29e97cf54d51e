"""Router accuracy over synthetic envs running in the Docker sandbox: routing_cases reads the
first user message of each capability's example env (envs/examples/, a SandboxedEnv on one
shared pool) and of shop tasks no capability covers; a Router (stand-in scorer: a keyword
rule over the task message, so the decisions — right, wrong and abstained — are known) is
measured and its accuracy + confusion matrix stored as the evaluation `router_accuracy`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gapforge.agents.router import LabelScorer, Router, RoutingConfig, make_options
from gapforge.envs.naming import synthetic_env_name
from gapforge.envs.registry import make_env
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.evaluation.routing import measure_router, routing_cases
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.pool import SandboxPool
from gapforge.store import Store

pytestmark = pytest.mark.docker

EXAMPLES = Path(__file__).resolve().parents[2] / "envs" / "examples"
CAPS = ["precondition_verification", "structured_data_reasoning"]
TAG = "gapforge-sandbox:latest"


@pytest.fixture(scope="module")
def sandbox_cfg(docker_client) -> SandboxConfig:
    from gapforge.sandbox.image import build_image, image_is_current

    if not image_is_current(docker_client, TAG):
        build_image(docker_client, TAG, method="local-python")
    return SandboxConfig(
        backend="docker", image=TAG, memory_mb=256, cpus=1.0, call_timeout_s=20.0, start_timeout_s=60.0, pool_size=1
    )


class KeywordScorer(LabelScorer):
    """A LabelScorer stand-in: the label logprobs come from keywords of the task message in the routing prompt."""

    def label_token_ids(self, label: str) -> list[int]:
        return [ord(c) for c in label]

    def render(self, messages: list[dict[str, Any]]) -> str:
        return (
            messages[0]["content"].split('"""')[-2].lower()
        )  # the last quoted block: the task's first user message (prompts/router.md)

    def label_logprobs(self, prompts: list[str], token_ids: list[int]) -> list[list[float]]:
        rows = []
        for text in prompts:
            a = -5.0 + (4.9 if ("cancel" in text or "return" in text) else 0.0)
            b = -5.0 + (5.0 if "every" in text else 0.0)
            rows.append([a, b, -2.0])  # A, B, none (C)
        return rows


def test_routing_cases_from_sandboxed_envs_and_the_stored_confusion(
    sandbox_cfg: SandboxConfig, docker_client, tmp_path: Path
) -> None:
    pid_label = {"label": f"gapforge.pid={os.getpid()}"}
    before = {c.id for c in docker_client.containers.list(all=True, filters=pid_label)}
    with SandboxPool(sandbox_cfg, size=0, sweep_on_start=False) as pool:
        made: list[SandboxedEnv] = []

        def factory(cap: str):
            def make() -> SandboxedEnv:
                made.append(SandboxedEnv.pooled(EXAMPLES / f"{cap}.py", pool))
                return made[-1]

            return make

        cases = routing_cases(
            {cap: factory(cap) for cap in CAPS},
            [0, 1],
            target=lambda: make_env("shop"),
            none_tasks=["shop-lookup-001", "shop-lookup-007"],
        )
    assert all(e.name == synthetic_env_name(e.module_path.stem) for e in made) and len(made) == 4
    assert [c.source for c in cases] == [
        "synthetic:precondition_verification:seed=0",
        "synthetic:precondition_verification:seed=1",
        "synthetic:structured_data_reasoning:seed=0",
        "synthetic:structured_data_reasoning:seed=1",
        "target:shop-lookup-001",
        "target:shop-lookup-007",
    ]
    assert [c.expected for c in cases] == [CAPS[0], CAPS[0], CAPS[1], CAPS[1], "none", "none"]
    # the sandbox gives the same first messages as the env run in-process (one protocol, one name)
    for c in cases[:4]:
        cap, seed = c.source.split(":")[1], int(c.source.rsplit("=", 1)[1])
        local = InProcessSyntheticEnv(EXAMPLES / f"{cap}.py")
        assert c.first_message == next(m.content for m in local.reset(seed) if m.role == "user")
    assert {
        c.id for c in docker_client.containers.list(all=True, filters=pid_label)
    } == before  # the pool closed its containers

    router = Router(
        make_options([{"name": c, "adapter": c} for c in CAPS], RoutingConfig().labels),
        KeywordScorer(),
        RoutingConfig(margin=1.0),
    )
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        run_id = store.create_run("trace", {"env": "shop"})
        acc = measure_router(router, cases, store=store, run_id=run_id)
        # structured seed 0 ("... Skip cancelled orders") reads as a cancellation -> A (wrong);
        # structured seed 1 ("return every ... item") -> B by 0.1 < margin 1.0 -> abstained = none (wrong)
        assert acc.labels == [*CAPS, "none"]
        assert acc.matrix == [[2, 0, 0], [1, 0, 1], [0, 0, 2]]
        assert acc.accuracy == pytest.approx(4 / 6) and acc.abstained == 1 and acc.cases == 6
        stored = store.get_evaluation(run_id, "router_accuracy").metrics
        assert (
            stored["matrix"] == acc.matrix and stored["accuracy"] == pytest.approx(4 / 6) and stored["abstained"] == 1
        )
        assert [c["expected"] for c in stored["cases"]] == [c.expected for c in cases]
        assert (
            stored["cases"][3]["decision"]["abstained"] is True
            and stored["cases"][2]["decision"]["capability"] == CAPS[0]
        )
    finally:
        store.close()
