"""SandboxedEnv, the pool, both backends, the hardened container settings and the image cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapforge.config import SandboxConfig
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Environment, Message, ToolCall
from gapforge.sandbox.docker_backend import container_kwargs, list_containers, sweep
from gapforge.sandbox.env import SandboxedEnv, open_env
from gapforge.sandbox.errors import EnvCodeError, SandboxError
from gapforge.sandbox.pool import SandboxPool

ENVS = Path(__file__).parent / "envs"


def _play(env: SandboxedEnv, seed: int) -> float:
    env.reset(seed)
    for i, action in enumerate(env.solution(seed)):
        if "tool" in action:
            msg = Message.assistant(
                tool_calls=[ToolCall(id=f"c{i}", name=action["tool"], arguments=action["arguments"])]
            )
        else:
            msg = Message.assistant(action["say"])
        if env.step(msg).done:
            break
    return env.score().reward


def test_container_settings_are_hardened():
    kw = container_kwargs(SandboxConfig(memory_mb=256, cpus=0.5, pids_limit=16), "/host/stage")
    assert kw["network_mode"] == "none" and kw["read_only"] is True
    assert kw["cap_drop"] == ["ALL"] and kw["security_opt"] == ["no-new-privileges"]
    assert kw["user"] == "65534:65534"
    assert kw["mem_limit"] == kw["memswap_limit"] == "256m"
    assert kw["pids_limit"] == 16 and kw["nano_cpus"] == 500_000_000
    assert kw["volumes"] == {"/host/stage": {"bind": "/opt/gapforge", "mode": "ro"}}
    assert "size=64m" in kw["tmpfs"]["/tmp"]
    assert kw["labels"]["gapforge"] == "1"
    assert not any("docker.sock" in str(v) for v in kw.values())
    assert "environment" in kw and not any(k.endswith("KEY") for k in kw["environment"])


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_sandboxed_env_plays_an_episode_in_docker(sandbox_config, counter_env_path):
    with open_env(counter_env_path, sandbox_config) as env:
        assert isinstance(env, Environment)
        assert env.name == "synthetic:arithmetic_tracking" and env.describe()["capability"] == "arithmetic_tracking"
        assert [t["function"]["name"] for t in env.tools()] == ["add"]
        assert _play(env, 3) == 1.0
        assert env.scenario(3) == env.scenario(3) != env.scenario(4)
        env.reset(4)
        assert env.score().reward < 1.0  # do-nothing scores low
        with pytest.raises(EnvError):
            env.reset("task-7")


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_pool_is_warm_reuses_healthy_and_destroys_failed(sandbox_config, counter_env_path, docker_client):
    with SandboxPool(sandbox_config) as pool:
        assert pool.wait_warm(30)
        env = SandboxedEnv(counter_env_path, sandbox_config, pool)
        first = env.sandbox_id
        env.close()
        assert pool.counts()["idle"] == 1  # healthy: kept for the same module
        env2 = SandboxedEnv(counter_env_path, sandbox_config, pool)
        assert env2.sandbox_id == first
        with pytest.raises(EnvCodeError):
            env2.step(Message.assistant("no reset yet"))  # the env raises: a failure during the lease
        env2.close()
        assert pool.counts()["idle"] == 0  # a sandbox that had a failure is destroyed
        assert first not in {c["Id"] for c in list_containers(docker_client)}


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_bad_module_is_a_load_error(sandbox_config, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import envs.sdk\nraise RuntimeError('generator forgot something')\n")
    with pytest.raises(EnvCodeError) as info:
        SandboxedEnv(broken, sandbox_config)
    assert info.value.kind == "load_error" and "generator forgot something" in info.value.detail
    assert "Traceback" in (info.value.traceback or "")
    assert f'File "{broken}", line 2' in info.value.traceback  # the user's file, not the sandbox's hashed copy

    syntax = tmp_path / "syntax.py"
    syntax.write_text("import envs.sdk\n\ndef reset(:\n    pass\n")
    with pytest.raises(EnvCodeError) as info:
        SandboxedEnv(syntax, sandbox_config)
    assert "SyntaxError" in info.value.detail and f"({syntax}, line 3)" in info.value.detail, info.value.detail


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftovers")
def test_a_container_docker_refuses_is_the_sandbox_settings_fault_not_the_envs(sandbox_config, counter_env_path):
    too_many = sandbox_config.model_copy(update={"cpus": 4096.0})  # more CPUs than any test host has
    with pytest.raises(SandboxError) as info:
        SandboxedEnv(counter_env_path, too_many)
    assert not isinstance(info.value, EnvCodeError) and info.value.exit_code == 2
    assert str(info.value).startswith("Docker refused to create a sandbox container (") and "CPU" in str(info.value)


def test_missing_module_is_a_user_error(sandbox_config_process):
    with pytest.raises(SandboxError, match="not found"):
        SandboxedEnv("/nonexistent/env.py", sandbox_config_process)


@pytest.fixture
def sandbox_config_process() -> SandboxConfig:
    return SandboxConfig(backend="process", memory_mb=512, call_timeout_s=2.0, max_output_bytes=64_000)


def test_process_backend_speaks_the_same_protocol_and_warns(sandbox_config_process, counter_env_path, caplog):
    with caplog.at_level("WARNING"):
        with open_env(counter_env_path, sandbox_config_process) as env:
            assert _play(env, 2) == 1.0
    assert any("WITHOUT ISOLATION" in r.message for r in caplog.records)


def test_process_backend_times_out_and_kills(sandbox_config_process):
    cfg = sandbox_config_process.model_copy(update={"call_timeout_s": 0.5})
    with SandboxedEnv(Path(__file__).parent / "hostile" / "spin.py", cfg) as env:
        with pytest.raises(EnvCodeError) as info:
            env.reset(0)
    assert info.value.kind == "timeout"


@pytest.mark.docker
def test_sweep_removes_containers_of_this_process(sandbox_config, counter_env_path, docker_client):
    pool = SandboxPool(sandbox_config, sweep_on_start=False)
    try:
        env = SandboxedEnv(counter_env_path, sandbox_config, pool)
        cid = env.sandbox_id
        sweep(docker_client)  # default: only containers whose owner process is gone
        assert cid in {c["Id"] for c in list_containers(docker_client)}  # our process is alive: kept
        assert sweep(docker_client, only_pid=os.getpid()) >= 1
        assert cid not in {c["Id"] for c in list_containers(docker_client)}
    finally:
        pool.close()


@pytest.mark.docker
def test_image_is_cached_by_recipe_label(sandbox_image, docker_client):
    from gapforge.sandbox.image import build_image, recipe_hash

    assert docker_client.images.get(sandbox_image).labels["gapforge.image"] == recipe_hash()
    assert build_image(docker_client, sandbox_image) == "cached"
    with pytest.raises(SandboxError, match="unknown build method"):
        build_image(docker_client, sandbox_image, method="nope")  # type: ignore[arg-type]


def test_process_backend_child_runs_under_its_rlimits(sandbox_config_process, tmp_path):
    from gapforge.sandbox.mount import Mount
    from gapforge.sandbox.process_backend import start_process

    stage = Mount()
    try:
        channel = start_process(sandbox_config_process, str(stage.path))
        try:
            limits = Path(f"/proc/{channel.ident}/limits").read_text()
        finally:
            channel.kill()
    finally:
        stage.close()
    address = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert address.split()[3] == str(sandbox_config_process.memory_mb * 2**20)
    core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
    assert core.split()[4] == "0"


def test_envs_opened_at_once_stage_the_same_module_without_tripping_on_each_other(tmp_path: Path) -> None:
    """A readiness check's first wave opens all its envs at once on threads; they used to share one `.tmp` name
    while staging the module (FileNotFoundError for the losers: env faults blamed on the env)."""
    import threading

    from gapforge.sandbox.mount import Mount

    module = tmp_path / "m.py"
    module.write_text("X = 1\n" * 2000)
    for _ in range(20):
        stage = Mount()
        errors: list[BaseException] = []
        start = threading.Barrier(8)

        def add(stage: Mount = stage, start: threading.Barrier = start, errors: list[BaseException] = errors) -> None:
            start.wait()
            try:
                stage.add_module(module)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=add) for _ in range(8)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            staged = list((stage.path / "modules").iterdir())
            assert not errors, errors[0]
            assert [p.read_bytes() for p in staged] == [module.read_bytes()]  # one module, whole, no temp file left
        finally:
            stage.close()
