"""Hostile env modules must be contained: the call fails with the right EnvCodeError
kind (or the env observes the failure), the host is unaffected, and no
gapforge container is left behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gapforge.envs.protocol import Message, ToolCall
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.errors import EnvCodeError

HOSTILE = Path(__file__).parent / "hostile"

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]


def _probe(env: SandboxedEnv, arg: str = "") -> dict:
    env.reset(0)
    out = env.step(Message.assistant(tool_calls=[ToolCall(id="c1", name="probe", arguments={"arg": arg})]))
    assert out.messages[0].role == "tool"
    return json.loads(out.messages[0].content or "{}")


def _fails(cfg, module: str, kind: str) -> EnvCodeError:
    """The module's first call fails with `kind` (seconds until each failure: bench/sandbox_faults.py)."""
    with SandboxedEnv(HOSTILE / f"{module}.py", cfg) as env:
        with pytest.raises(EnvCodeError) as info:
            env.reset(0)
        assert env.failures[-1]["kind"] == kind
    assert info.value.kind == kind, info.value
    return info.value


def test_network_is_unreachable(sandbox_config):
    with SandboxedEnv(HOSTILE / "network.py", sandbox_config) as env:
        result = _probe(env)
    assert set(result) == {"1.1.1.1:53", "8.8.8.8:443", "172.17.0.1:2375", "172.17.0.1:22", "dns"}
    assert all(v.startswith("error:") for v in result.values()), result


def test_filesystem_is_read_only_and_host_files_are_invisible(sandbox_config, tmp_path: Path):
    marker = tmp_path / "host_secret.txt"
    marker.write_text("host-only")
    project_file = Path(__file__).resolve().parents[2] / "pyproject.toml"
    with SandboxedEnv(HOSTILE / "filesystem.py", sandbox_config) as env:
        result = _probe(env, f"{marker}:{project_file}:{Path.home()}")
    assert result.pop("write /tmp/ok") == "written"  # positive control: /tmp is the one writable place
    assert all(v.startswith("error:") for v in result.values()), result
    assert "Read-only file system" in result["write /pwned"]


@pytest.mark.parametrize("backend", ["docker", "process"])
def test_host_environment_secrets_are_invisible(sandbox_config, monkeypatch, backend):
    monkeypatch.setenv("GAPFORGE_FAKE_SECRET", "hunter2-do-not-leak")
    cfg = sandbox_config.model_copy(update={"backend": backend})
    with SandboxedEnv(HOSTILE / "secrets.py", cfg) as env:
        seen = _probe(env)
    assert "GAPFORGE_FAKE_SECRET" not in seen
    assert "hunter2-do-not-leak" not in json.dumps(seen)
    assert not any(k.endswith("_API_KEY") for k in seen)


def _host_pids_in_container(container_id: str) -> list[str]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if container_id in Path(f"/proc/{pid}/cgroup").read_text():
                pids.append(pid)
        except OSError:
            pass
    return pids


def test_fork_bomb_is_contained(sandbox_config):
    cfg = sandbox_config.model_copy(update={"call_timeout_s": 1.5})
    with SandboxedEnv(HOSTILE / "fork_bomb.py", cfg) as env:
        cid = env.sandbox_id
        assert cid and _host_pids_in_container(cid)  # the server runs, visible from the host
        with pytest.raises(EnvCodeError) as info:
            env.reset(0)
    assert info.value.kind == "timeout"
    assert _host_pids_in_container(cid) == []  # every forked process died with the container
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still fork


def test_unbounded_allocation_is_oom(sandbox_config):
    err = _fails(sandbox_config, "memory_hog", "oom")
    assert "128" in err.detail or "MemoryError" in err.detail


@pytest.mark.parametrize("module", ["spin", "sleep", "fd_flood"])
def test_hangs_time_out(sandbox_config, module):
    cfg = sandbox_config.model_copy(update={"call_timeout_s": 1.0})
    err = _fails(cfg, module, "timeout")
    assert "1s" in err.detail


def test_endless_printing_is_an_output_flood(sandbox_config):
    _fails(sandbox_config, "print_flood", "output_flood")


def test_huge_result_is_an_output_flood(sandbox_config):
    with SandboxedEnv(HOSTILE / "huge_result.py", sandbox_config) as env:
        env.reset(0)
        with pytest.raises(EnvCodeError) as info:
            env.step(Message.assistant(tool_calls=[ToolCall(id="c1", name="probe", arguments={})]))
    assert info.value.kind == "output_flood"


def test_interpreter_exit_is_a_crash(sandbox_config):
    err = _fails(sandbox_config, "hard_exit", "crash")
    assert "code 3" in err.detail


def test_garbage_on_the_channel_is_bad_output(sandbox_config):
    _fails(sandbox_config, "channel_garbage", "bad_output")


def test_env_recovers_with_a_fresh_sandbox_after_a_kill(sandbox_config):
    """After a fatal failure, score() says the episode is lost and reset() starts a fresh sandbox."""
    cfg = sandbox_config.model_copy(update={"call_timeout_s": 1.0})
    with SandboxedEnv(Path(__file__).parent / "envs" / "flaky_env.py", cfg) as env:
        with pytest.raises(EnvCodeError) as info:
            env.reset(0)  # seed 0 hangs
        assert info.value.kind == "timeout"
        with pytest.raises(EnvCodeError) as info:
            env.score()
        assert info.value.kind == "crash"
        assert env.reset(1)[1].content == "seed 1"
        assert env.score().reward == 1.0
        assert [f["kind"] for f in env.failures] == ["timeout"]
