"""Infrastructure is never the env's failure in the self-test: readiness episodes ended by a policy
endpoint answering 500 are retried, then stop the validation (INCOMPLETE, exit 3) instead of a
grpo_ready FAIL; sandboxes killed from outside and recovered are listed in the report and its
JSON; a kill that persists stops the validation the same way and the report is still written."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gapforge.agents.episode import run_episode
from gapforge.cli import app
from gapforge.envs.errors import InfrastructureFailure
from gapforge.envs.protocol import Message
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.checks import validate_env
from gapforge.sandbox.checks.grpo import check_grpo_ready
from gapforge.sandbox.checks.settings import GRPOReadinessConfig
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.pool import SandboxPool
from gapforge.serving import openai_policy
from gapforge.serving.openai_policy import EndpointPolicy
from tests.fakes.fake_openai import FakeOpenAIServer, text_reply

BASELINE = Path(__file__).parent / "broken" / "baseline_ok.py"
COUNTER = Path(__file__).parent / "envs" / "counter_env.py"


async def _runner(policy: Any, env: Any, seed: int, temperature: float) -> Any:
    return await run_episode(policy, env, seed, max_turns=3, temperature=temperature)


@pytest.fixture
def no_breaker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_policy, "BREAKER_FAILURES", 1000)  # these tests count every request


def _down_policy(srv: FakeOpenAIServer) -> EndpointPolicy:
    return EndpointPolicy(srv.base_url, "m", max_retries=0, retry_backoff_s=0.0)


async def test_an_endpoint_answering_500_is_retried_then_raised_never_graded(no_breaker: None) -> None:
    with FakeOpenAIServer(text_reply("ok"), fail_rate=1.0) as srv:
        policy = _down_policy(srv)
        try:
            with pytest.raises(InfrastructureFailure) as info:
                await check_grpo_ready(
                    lambda: InProcessSyntheticEnv(BASELINE),
                    [0, 1],
                    policy,
                    _runner,
                    GRPOReadinessConfig(groups=2, samples=2),
                    concurrency=4,
                )
        finally:
            await policy.aclose()
        requests = srv.request_count
    assert info.value.cause == "endpoint" and "HTTP 500" in str(info.value)
    assert requests == 2 * 2 * 2  # each of the 4 episodes played twice (one retry), one request each


async def test_a_validation_under_an_endpoint_outage_is_incomplete_not_failed(no_breaker: None) -> None:
    with FakeOpenAIServer(text_reply("ok"), fail_rate=1.0) as srv:
        policy = _down_policy(srv)
        try:
            report = await validate_env(
                lambda: InProcessSyntheticEnv(BASELINE),
                seeds=4,
                policy=policy,
                run_episode=_runner,
                readiness=GRPOReadinessConfig(groups=2, samples=2),
            )
        finally:
            await policy.aclose()
    grpo = report.check("grpo_ready")
    assert (
        report.incomplete is not None
        and report.incomplete["check"] == "grpo_ready"
        and report.incomplete["cause"] == "endpoint"
    )
    assert grpo.verdict == "INCOMPLETE" and "informative" not in grpo.summary and "not the env's doing" in grpo.summary
    assert not report.passed and "grpo_ready" not in report.failed_names()  # not passed, and not the env's failure
    assert report.to_json()["incomplete"]["cause"] == "endpoint"


def test_a_recovered_endpoint_blip_still_grades_the_env(no_breaker: None) -> None:
    # the first request fails, then it answers (with two failures the same episode could draw both: a race, not a blip)
    with FakeOpenAIServer(text_reply("Sorry."), fail_first=1) as srv:
        report = asyncio.run(
            validate_env(
                lambda: InProcessSyntheticEnv(BASELINE),
                seeds=4,
                run_episode=_runner,
                policy=_down_policy(srv),
                readiness=GRPOReadinessConfig(groups=2, samples=2, min_informative=0.0, max_all_zero=1.0, mean_low=0.0),
            )
        )
    grpo = report.check("grpo_ready")
    assert report.incomplete is None and grpo.verdict == "PASS" and grpo.evidence["infra_retried"] == 1
    assert grpo.evidence["rollouts"] == 4  # four graded episodes; the lost one was played again, not scored 0


def test_cli_validate_under_an_outage_exits_3_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    with FakeOpenAIServer(text_reply("ok"), fail_rate=1.0) as srv:
        res = CliRunner().invoke(
            app,
            [
                "env",
                "validate",
                str(COUNTER),
                "--seeds",
                "4",
                "--json",
                str(out),
                "--set",
                f"workspace={tmp_path}",
                "--set",
                "sandbox.backend=process",
                "--set",
                "policy.kind=endpoint",
                "--set",
                f"policy.endpoint.base_url={srv.base_url}",
                "--set",
                "policy.endpoint.max_retries=0",
                "--set",
                "policy.endpoint.retry_backoff_s=0",
                "--set",
                "grpo_readiness.groups=2",
                "--set",
                "grpo_readiness.samples=2",
            ],
            terminal_width=250,
        )
    assert res.exit_code == 3, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "stopped at check grpo_ready: the endpoint kept failing" in errors[0]
    assert f"resume with `gapforge env validate {COUNTER}`" in errors[0] and "Traceback" not in res.output
    assert "INCOMPLETE" in res.output and "FAILED" not in res.output
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["incomplete"]["cause"] == "endpoint"
    assert next(c for c in data["checks"] if c["name"] == "grpo_ready")["verdict"] == "INCOMPLETE"


def _kill(cid: str | None) -> None:
    if cid:
        subprocess.run(["docker", "kill", cid], capture_output=True, check=False)


class _Killer:
    """Kills the env's container from outside: just before its first step() call (`once`), or
    right after every lease (`always`: no sandbox ever answers)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.done = mode, False

    def env_class(self) -> type[SandboxedEnv]:
        killer = self

        class KilledFromOutside(SandboxedEnv):
            def step(self, message: Message) -> Any:
                if killer.mode == "once" and not killer.done and self.sandbox_id:
                    killer.done = True
                    _kill(self.sandbox_id)
                return super().step(message)

            def _lease(self) -> Any:
                channel = super()._lease()
                if killer.mode == "always":
                    _kill(channel.ident)
                return channel

        return KilledFromOutside


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_a_container_killed_during_validation_is_recovered_and_listed(sandbox_config) -> None:
    cls = _Killer("once").env_class()
    with SandboxPool(sandbox_config, size=1) as pool:
        clean = asyncio.run(validate_env(lambda: SandboxedEnv.pooled(COUNTER, pool), seeds=4, module=COUNTER))
        report = asyncio.run(validate_env(lambda: cls.pooled(COUNTER, pool), seeds=4, module=COUNTER))
    # the kill changes no verdict: the same checks pass and fail as without it
    assert [(c.name, c.verdict) for c in report.checks] == [(c.name, c.verdict) for c in clean.checks]
    assert clean.sandbox_fault_count == 0 and report.sandbox_fault_count == 1 and report.incomplete is None
    fault = report.sandbox_faults[0]
    assert fault["kind"] == "killed" and fault["lost_call"] == "step" and fault["replayed"].startswith("reset + ")
    assert "1 sandbox(es) lost" in (report.faults_line() or "")
    assert report.to_json()["sandbox_faults"][0]["kind"] == "killed"


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_a_kill_that_persists_stops_the_validation_without_blaming_the_env(sandbox_config) -> None:
    cls = _Killer("always").env_class()
    with SandboxPool(sandbox_config, size=1) as pool:
        report = asyncio.run(validate_env(lambda: cls.pooled(COUNTER, pool), seeds=4, module=COUNTER))
    stopped = report.incomplete
    assert stopped is not None and stopped["cause"] == "sandbox" and "killed" in stopped["error"]
    assert report.check(stopped["check"]).verdict == "INCOMPLETE"
    assert report.failures == [] or all(
        "blocked_by" not in c.evidence and c.name != stopped["check"] for c in report.failures
    )
    assert not report.passed and report.sandbox_fault_count >= 3  # every try of the lost call is listed
