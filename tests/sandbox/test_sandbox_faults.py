"""Sandbox faults that are not the env's doing: a container killed or removed from outside is
named as such (never OOM), retried on a fresh container with the episode replayed, and never
counted against the env; sweeps tolerate containers vanishing under them and remove only
containers whose owning process is truly gone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gapforge.envs.protocol import Message, ToolCall
from gapforge.sandbox.docker_backend import LABEL, container_kwargs, list_containers, remove_container, sweep
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.errors import SandboxError, SandboxLost

ENVS = Path(__file__).parent / "envs"

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]


def _kill_when_busy(cid: str, how: list[str], delay: float = 0.4) -> threading.Thread:
    t = threading.Thread(
        target=lambda: (time.sleep(delay), subprocess.run(["docker", *how, cid], capture_output=True, check=False))
    )
    t.start()
    return t


def _bump(env: SandboxedEnv) -> str:
    out = env.step(Message.assistant(tool_calls=[ToolCall(id="b", name="bump", arguments={})]))
    return out.messages[0].content or ""


@pytest.mark.parametrize("how,kind", [(["kill"], "killed"), (["rm", "-f"], "removed")])
def test_container_killed_from_outside_is_retried_not_blamed_on_the_env(sandbox_config, how, kind):
    with SandboxedEnv(ENVS / "slow_env.py", sandbox_config) as env:
        env.reset(0)
        assert _bump(env) == "1"
        first = env.sandbox_id
        killer = _kill_when_busy(first, how)
        assert _bump(env) == "2"  # sanity: the sandbox is busy with nothing yet
        env.reset(1)  # busy for ~1 s: killed meanwhile, retried on a fresh container
        killer.join()
        assert env.sandbox_id != first
        assert _bump(env) == "1" and env.score().reward == 0.5
        assert list(env.failures) == []  # nothing counted against the env
        assert [f["kind"] for f in env.sandbox_faults] == [kind] and env.failure_count == 0
        if kind == "killed":
            assert (
                "from outside" in env.sandbox_faults[0]["detail"]
                and "oom" not in env.sandbox_faults[0]["detail"].lower()
            )


def test_a_kill_mid_episode_replays_the_episode_on_a_fresh_container(sandbox_config):
    with SandboxedEnv(ENVS / "slow_env.py", sandbox_config) as env:
        env.reset(2)
        assert _bump(env) == "1"
        subprocess.run(["docker", "kill", env.sandbox_id], capture_output=True, check=True)
        assert _bump(env) == "2"  # reset(2) + the first bump replayed, then this one
        assert env.score().reward == 1.0 and list(env.failures) == []


def test_a_persistent_outside_kill_is_a_sandbox_error_not_an_env_failure(sandbox_config):
    with SandboxedEnv(ENVS / "slow_env.py", sandbox_config, infra_retries=0) as env:
        killer = _kill_when_busy(env.sandbox_id, ["kill"])
        with pytest.raises(SandboxLost) as info:
            env.reset(0)
        killer.join()
    assert isinstance(info.value, SandboxError) and info.value.kind == "killed"
    assert list(env.failures) == []


def test_sweep_takes_only_truly_orphaned_containers_and_tolerates_vanished_ones(sandbox_config, docker_client):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    kw = container_kwargs(sandbox_config, str(ENVS))
    kw["command"] = ["sleep", "60"]
    owners = {
        "dead_pid": {f"{LABEL}.pid": dead.stdout.strip()},
        "recycled_pid": {f"{LABEL}.pid": str(os.getpid()), f"{LABEL}.started": "1"},  # our pid, another process's start
        "live": {},  # this process: kept
    }
    ids = {}
    for name, labels in owners.items():
        c = docker_client.containers.create(**(kw | {"labels": kw["labels"] | labels | {f"{LABEL}.test": name}}))
        ids[name] = c.id
    try:
        stale = list_containers(docker_client)  # a listing taken just before another process removes one
        remove_container(docker_client, ids["dead_pid"])
        assert sweep(_StaleListing(docker_client, stale)) >= 2  # the vanished one is skipped, not an error
        left = {c["Id"] for c in list_containers(docker_client)}
        assert ids["live"] in left and ids["recycled_pid"] not in left and ids["dead_pid"] not in left
    finally:
        for cid in ids.values():
            remove_container(docker_client, cid)


class _StaleListing:
    """A Docker client whose container listing is a stale snapshot (the race, made deterministic)."""

    def __init__(self, client, listing):
        self._client, self._listing = client, listing

    def __getattr__(self, name):
        return getattr(self._client, name)

    @property
    def api(self):
        outer = self

        class Api:
            def containers(self, **_kw):
                return outer._listing

            def __getattr__(self, name):
                return getattr(outer._client.api, name)

        return Api()


def test_concurrent_validations_and_sweeps_never_crash(sandbox_config, tmp_path):
    """4 processes x 3 rounds of (pool with a start-up sweep, an episode, a sweep) at once."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys\n"
        "from gapforge.sandbox.config import SandboxConfig\n"
        "from gapforge.sandbox.docker_backend import sweep\n"
        "from gapforge.sandbox.env import SandboxedEnv\n"
        "from gapforge.sandbox.pool import SandboxPool\n"
        f"cfg = SandboxConfig.model_validate_json({sandbox_config.model_dump_json()!r})\n"
        "for i in range(3):\n"
        "    with SandboxPool(cfg, size=0) as pool, SandboxedEnv(sys.argv[1], cfg, pool) as env:\n"
        "        env.reset(i)\n"
        "        assert env.score().reward < 1.0\n"
        "    sweep()\n"
    )
    env_path = str(ENVS / "counter_env.py")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), env_path],
            cwd=Path(__file__).parents[2],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors


class _Gone(Exception):
    """Stands for requests' ConnectionError: the daemon does not answer."""


def _channel_with(state: dict | None, *, kill_signal: str | None = None, daemon_up: bool = True):
    """A DockerChannel whose container/daemon answer as given (the diagnosis table, without Docker)."""
    import docker.errors

    from gapforge.sandbox.docker_backend import DockerChannel

    class Container:
        id = "c0ffee"
        attrs = {"State": state or {}, "HostConfig": {"Memory": 128 * 2**20}, "Created": "2026-01-01T00:00:00.0Z"}

        def wait(self, timeout):
            if not daemon_up:
                raise _Gone("connection refused")
            if state is None:
                raise docker.errors.NotFound("gone")

        def reload(self):
            pass

        def logs(self, **_kw):
            return b"Traceback: boom"

    class Api:
        def inspect_container(self, _cid):
            if not daemon_up:
                raise _Gone("connection refused")
            raise docker.errors.NotFound("gone")

    class Client:
        api = Api()

        def events(self, **_kw):
            return iter([{"Actor": {"Attributes": {"signal": kill_signal}}}] if kill_signal else [])

    ch = DockerChannel.__new__(DockerChannel)
    ch.client, ch.container = Client(), Container()
    return ch


@pytest.mark.parametrize(
    "state,signal,daemon_up,kind,needle",
    [
        ({"ExitCode": 137, "OOMKilled": True}, None, True, "oom", "128 MB"),
        ({"ExitCode": 137, "OOMKilled": False}, "9", True, "killed", "signal 9"),
        ({"ExitCode": 143, "OOMKilled": False}, "15", True, "killed", "signal 15"),
        ({"ExitCode": 137, "OOMKilled": False}, None, True, "killed", "without the daemon's OOMKilled"),
        ({"ExitCode": 3, "OOMKilled": False}, None, True, "crash", "code 3"),
        (None, None, True, "removed", "removed from outside"),
        ({"ExitCode": 0}, None, False, "daemon_gone", "stopped answering"),
    ],
)
def test_diagnosis_blames_the_right_boundary(state, signal, daemon_up, kind, needle):
    got_kind, detail = _channel_with(state, kill_signal=signal, daemon_up=daemon_up)._diagnose()
    assert got_kind == kind and needle in detail
