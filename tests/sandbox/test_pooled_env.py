"""A SandboxedEnv a trainer can hold for thousands of episodes: caller-owned pool, lazy
lease on the first reset, one container across 1,000 resets with flat memory, a bounded
failure log, SandboxError after close, recovery from a dead container."""

from __future__ import annotations

import gc
import os
import tracemalloc

import pytest

from gapforge.envs.naming import capability_of, synthetic_env_name
from gapforge.envs.protocol import Message
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.errors import EnvCodeError, SandboxError
from gapforge.sandbox.pool import SandboxPool


def gapforge_containers(client) -> list[str]:
    return [c.id for c in client.containers.list(all=True, filters={"label": f"gapforge.pid={os.getpid()}"})]


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_pooled_env_holds_one_container_for_1000_resets(sandbox_config, counter_env_path, docker_client):
    before = set(gapforge_containers(docker_client))
    with SandboxPool(sandbox_config, size=0, sweep_on_start=False) as pool:
        env = SandboxedEnv.pooled(counter_env_path, pool)
        assert env.sandbox_id is None and pool.counts()["leased"] == 0  # nothing leased before the first reset
        env.reset(0)
        first = env.sandbox_id
        assert first is not None
        for seed in range(1, 100):
            env.reset(seed)
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        for seed in range(100, 1000):
            env.reset(seed)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert env.sandbox_id == first
        assert set(gapforge_containers(docker_client)) - before == {first}
        assert grown < 256 * 1024, f"memory grew by {grown} bytes over 900 resets"
        env.close()
        assert pool.counts() == {"blank": 0, "idle": 1, "leased": 0}  # the pool stays open: it is the caller's
        with pytest.raises(SandboxError, match="closed"):
            env.reset(0)


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_failure_log_is_bounded_and_a_dead_container_is_replaced(sandbox_config, counter_env_path, docker_client):
    with SandboxPool(sandbox_config, size=0, sweep_on_start=False) as pool:
        env = SandboxedEnv.pooled(counter_env_path, pool, max_failures=5)
        for _ in range(8):
            with pytest.raises(EnvCodeError) as info:
                env.step(Message.assistant("no reset yet"))  # the env raises; the sandbox survives
            assert info.value.kind == "exception"
        assert env.failure_count == 8 and len(env.failures) == 5
        env.reset(1)
        dead = env.sandbox_id
        docker_client.containers.get(dead).kill()  # from outside: not the env's doing
        env.step(Message.assistant("hello"))  # replayed on a fresh sandbox (reset(1), then this step)
        assert env.sandbox_id not in (None, dead)
        assert [f["kind"] for f in env.sandbox_faults] == ["killed"] and env.failure_count == 8
        env.reset(2)
        env.close()


def test_one_name_in_process_and_in_the_sandbox(counter_env_path):
    in_process = InProcessSyntheticEnv(counter_env_path)
    assert in_process.name == synthetic_env_name("arithmetic_tracking") == "synthetic:arithmetic_tracking"
    assert capability_of(in_process.name) == "arithmetic_tracking" and capability_of("tau2:retail") is None
    assert synthetic_env_name(None, "/x/my_env.py") == "synthetic:my_env"
    with pytest.raises(ValueError):
        synthetic_env_name("Not Snake")
