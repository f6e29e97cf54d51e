"""GRPO readiness on local worker processes (executor/validation.py): the same verdict and the same rewards
as the check played in this process, a worker killed mid-check is WorkerLost (resumable) and the next check
gets a new worker, and the check's own failures come back as themselves."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import types
from pathlib import Path

import pytest

from gapforge.agents.errors import IncompleteStage
from gapforge.agents.validation import readiness_runner
from gapforge.config import PolicyConfig
from gapforge.demo_data import RECORDINGS_DIR, SHOP_POLICY_DIR
from gapforge.envs.errors import InfrastructureFailure
from gapforge.envs.protocol import Message, ToolCall
from gapforge.executor import ExecutorConfig, sandbox_checks
from gapforge.executor.validation import LocalReadinessChecks
from gapforge.sandbox.checks import GRPOReadinessConfig
from gapforge.sandbox.checks.grpo import check_grpo_ready
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.pool import SandboxPool
from gapforge.wiring import make_policy

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
MODULE = RECORDINGS_DIR / "shop" / "precondition_verification_3.py"  # the demo's accepted env
SHOP_POLICY = SHOP_POLICY_DIR


class StallingPolicy:
    """Looks a customer up every turn; at a temperature above 0.5 it first writes `marker` and stalls `delay_s`
    (picklable: the worker builds it from a partial)."""

    name = "stalling"

    def __init__(self, delay_s: float = 0.0, marker: str | None = None) -> None:
        self.delay_s, self.marker = delay_s, marker

    async def respond(self, messages: list[Message], tools: list[dict], *, temperature: float | None = None) -> Message:
        if (temperature or 0.0) > 0.5:
            if self.marker:  # whole or not at all: the test reads it the moment it exists
                tmp = Path(f"{self.marker}.{os.getpid()}.{len(messages)}")
                tmp.write_text(str(os.getpid()))
                tmp.replace(self.marker)
            await asyncio.sleep(self.delay_s)
        call = ToolCall(id=f"call_{len(messages)}", name="find_customer_by_email", arguments={"email": "x@example.com"})
        return Message(role="assistant", content=None, tool_calls=[call])


async def _endpoint_down(policy, env, seed, temperature):
    """Every episode ended by the endpoint (after the client's retries)."""
    return types.SimpleNamespace(termination="endpoint_error", error=f"connection refused at seed {seed}", reward=0.0)


def _shop_policy() -> PolicyConfig:
    return PolicyConfig(kind="local", local_path=str(SHOP_POLICY), temperature=0.7, max_new_tokens=96)


def test_readiness_in_a_worker_process_gives_the_verdict_and_rewards_played_here(sandbox_config) -> None:
    cfg = GRPOReadinessConfig(groups=2, samples=4).with_temperature(0.7)
    runner = readiness_runner(4)
    pol = _shop_policy()
    checks = sandbox_checks(
        ExecutorConfig(), sandbox_config, functools.partial(make_policy, pol), local_workers=2, threads=1
    )
    assert isinstance(checks, LocalReadinessChecks)

    async def here():
        policy = make_policy(pol)
        pool = SandboxPool(sandbox_config, size=2)
        try:
            return await check_grpo_ready(
                lambda: SandboxedEnv.pooled(MODULE, pool), [0, 1], policy, runner, cfg, concurrency=4
            )
        finally:
            await policy.aclose()
            pool.close()

    async def there():
        return await checks.readiness_for(MODULE)(None, [0, 1], object(), runner, cfg, concurrency=4)

    try:
        local, remote = asyncio.run(here()), asyncio.run(there())
        worker_pids = [p.pid for p in checks._pool._processes.values()]
    finally:
        checks.close()
    assert os.getpid() not in worker_pids and worker_pids
    assert remote.evidence["rollouts"] == 8 and "faults" not in remote.evidence
    assert (remote.verdict, remote.summary, remote.evidence["rewards"]) == (
        local.verdict,
        local.summary,
        local.evidence["rewards"],
    )


def test_a_worker_killed_mid_check_is_resumable_and_the_next_check_gets_a_new_worker(
    sandbox_config, tmp_path: Path
) -> None:
    marker = tmp_path / "playing"
    checks = LocalReadinessChecks(
        sandbox_config, functools.partial(StallingPolicy, 60.0, str(marker)), workers=1, threads=1
    )
    check = checks.readiness_for(MODULE)
    killed: list[int] = []

    def kill_once_playing() -> None:  # the worker writes its pid when its first episode asks the policy
        while not marker.is_file():
            threading.Event().wait(0.05)
        killed.append(int(marker.read_text()))
        os.kill(killed[0], signal.SIGKILL)

    try:
        watcher = threading.Thread(target=kill_once_playing, daemon=True)
        watcher.start()
        with pytest.raises(IncompleteStage, match="GRPO-readiness worker process ended"):
            asyncio.run(
                check(
                    None,
                    [0, 1],
                    object(),
                    readiness_runner(4),
                    GRPOReadinessConfig(groups=2, samples=2).with_temperature(1.0),
                    concurrency=4,
                )
            )
        watcher.join(5)
        every_group = GRPOReadinessConfig(groups=2, samples=2, max_all_zero=1.0, min_informative=0.0)  # no early stop
        every_group = every_group.with_temperature(0.1)
        again = asyncio.run(check(None, [0, 1], object(), readiness_runner(2), every_group, concurrency=4))
        assert again.evidence["rollouts"] == 4  # played by a new worker
        assert killed and killed[0] not in [p.pid for p in checks._pool._processes.values()]
    finally:
        checks.close()


def test_the_checks_own_failures_come_back_as_themselves_and_closures_play_here(sandbox_config) -> None:
    cfg = GRPOReadinessConfig(groups=1, samples=2)
    checks = LocalReadinessChecks(sandbox_config, functools.partial(StallingPolicy), workers=1, threads=1)
    try:
        with pytest.raises(InfrastructureFailure, match="the endpoint kept failing: 2 of 2 readiness episodes") as e:
            asyncio.run(checks.readiness_for(MODULE)(None, [0], object(), _endpoint_down, cfg, concurrency=2))
        assert e.value.cause == "endpoint"
        played_here: list[int] = []

        async def closure(policy, env, seed, temperature):  # cannot travel: the check runs in this process
            played_here.append(seed)
            return 0.5

        async def run():
            return await checks.readiness_for(MODULE)(
                lambda: SandboxedEnv(MODULE, sandbox_config), [0], StallingPolicy(), closure, cfg, concurrency=2
            )

        result = asyncio.run(run())
        assert played_here == [0, 0] and result.evidence["rollouts"] == 2
    finally:
        checks.close()
    assert sandbox_checks(ExecutorConfig(), sandbox_config, functools.partial(StallingPolicy), local_workers=1) is None
    assert (
        sandbox_checks(ExecutorConfig(), sandbox_config, lambda: StallingPolicy(), local_workers=2) is None
    )  # cannot travel


def test_env_validate_with_the_local_readiness_checks_runs_the_self_test_in_this_machines_sandbox(
    config, sandbox_config
) -> None:
    """`gapforge env validate` hands StageDeps.sandbox_checks to validate_module: with the local drop-in the self-test
    still needs this machine's opener (the Ray drop-in is the one that opens nothing here)."""
    from gapforge.agents.validation import validate_module
    from gapforge.wiring import build_deps

    config.sandbox = sandbox_config
    checks = LocalReadinessChecks(sandbox_config, functools.partial(StallingPolicy), workers=2, threads=1)

    async def run():
        with build_deps(config) as deps:
            return await validate_module(
                deps, MODULE, seeds=4, target="shop", report_dir=config.workspace / "v", checks=checks
            )

    try:
        report = asyncio.run(run()).report
    finally:
        checks.close()
    assert report.check("loads").passed and report.check("solvable").passed, report.failed_names()
