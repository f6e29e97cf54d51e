"""Env validation on a Ray node with Docker: the module's bytes travel, the checks and the GRPO-readiness
rollouts run there (a policy built on the worker), the report comes back with the same verdicts."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from gapforge.agents.validation import validate_module
from gapforge.config import PolicyConfig
from gapforge.executor import ExecutorConfig, ExecutorUnavailable, JobResources, sandbox_checks
from gapforge.wiring import build_deps, make_policy
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.sandbox.test_checks import BROKEN, declared
from tests.sandbox.test_checks_async import _alternating_responder

pytestmark = pytest.mark.docker


def _validate(config, sandbox_config, path: Path, checks, policy=None):
    config.sandbox = sandbox_config

    async def run():
        with build_deps(config) as deps:
            return await validate_module(
                deps, path, seeds=4, target="shop", policy=policy, report_dir=config.workspace / "v", checks=checks
            )

    return asyncio.run(run())


def test_a_module_validated_on_a_ray_docker_node_with_readiness_rollouts_there(
    ray_cluster, config, sandbox_config
) -> None:
    config.grpo_readiness.groups, config.grpo_readiness.samples = 4, 4
    path = BROKEN / "baseline_ok.py"
    with FakeOpenAIServer(_alternating_responder()) as srv:
        pol = PolicyConfig(kind="endpoint")
        pol.endpoint.base_url, pol.endpoint.model = srv.base_url, "fake"
        checks = sandbox_checks(ExecutorConfig(kind="ray"), sandbox_config, functools.partial(make_policy, pol))
        outcome = _validate(config, sandbox_config, path, checks, policy=make_policy(pol))
        requests = srv.request_count
    report = outcome.report
    assert report.module == str(path) and outcome.json_path.is_file()  # the driver's path, the report written here
    grpo = report.check("grpo_ready")
    assert (
        not grpo.skipped and grpo.evidence["rollouts"] == 16 and requests >= 16
    )  # played on the worker, against the endpoint
    assert report.passed, report.failed_names()


def test_a_broken_module_gets_the_same_verdicts_on_ray_as_in_the_local_sandbox(
    ray_cluster, config, sandbox_config
) -> None:
    path = BROKEN / "unsolvable.py"
    expected, _target = declared(path)
    remote = _validate(config, sandbox_config, path, sandbox_checks(ExecutorConfig(kind="ray"), sandbox_config)).report
    local = _validate(config, sandbox_config, path, None).report
    assert [(c.name, c.verdict, c.summary) for c in remote.checks] == [
        (c.name, c.verdict, c.summary) for c in local.checks
    ]
    assert expected and expected <= set(remote.failed_names())


def test_validation_asking_for_a_resource_no_node_has_is_refused_with_the_setting_to_fix(
    ray_cluster, config, sandbox_config
) -> None:
    cfg = ExecutorConfig(kind="ray", docker_resource="docker_host", validation=JobResources(docker=True))
    with pytest.raises(ExecutorUnavailable, match="executor.validation: no node of the Ray cluster has docker_host"):
        _validate(config, sandbox_config, BROKEN / "baseline_ok.py", sandbox_checks(cfg, sandbox_config))
