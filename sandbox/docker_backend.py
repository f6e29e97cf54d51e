"""Hardened Docker containers running the env server, and the sweeper.

Every container: network none, read-only rootfs, the stage mounted read-only,
a size-limited tmpfs /tmp, uid/gid 65534, all capabilities dropped,
no-new-privileges, memory = memory+swap limit, pids limit, CPU quota, capped
json-file logs, labels, no host env vars and never the Docker socket. The host
talks to the server through the container's attach socket (a persistent
stdin/stdout stream: ~0.1-1 ms per round trip, where `docker exec` costs tens
of ms). Containers are removed explicitly (not auto-removed, so an exit can
still be inspected for OOMKilled).
"""

from __future__ import annotations

import calendar
import os
import select
import socket
import socket as _socket
import struct
import time
from typing import Any

from gapforge.sandbox.channel import Channel
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.errors import NO_DAEMON, SandboxError, image_missing
from gapforge.sandbox.mount import CONTAINER_ROOT

LABEL = "gapforge"
SANDBOX_UID = "65534:65534"


def docker_client(fix: str | None = None) -> Any:
    """A connected Docker client, or SandboxError saying how to get one (`fix`: the hint that
    fits the caller, e.g. a sweep has nothing to do with the process backend)."""
    import docker
    import docker.errors
    import requests

    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as e:
        cause = " ".join(str(e).split())[:200]
        if "ermission denied" in cause:  # the daemon runs, this user may not talk to it
            raise SandboxError(
                f"Docker daemon refused access ({cause}): add this user to the docker group or use sudo"
            ) from None
        hint = NO_DAEMON if fix is None else f"no Docker daemon reachable: {fix}"
        raise SandboxError(f"{hint} ({cause})") from None


def require_image(client: Any, tag: str) -> None:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        raise SandboxError(image_missing(tag)) from None


def container_kwargs(cfg: SandboxConfig, stage_path: str) -> dict[str, Any]:
    """The hardened `containers.create` arguments (pure, so tests can inspect them)."""
    from docker.types import LogConfig

    tmp_mb = max(8, cfg.memory_mb // 4)
    return {
        "image": cfg.image,
        "command": ["python3", "-I", "-S", "-B", f"{CONTAINER_ROOT}/server.py", str(cfg.max_output_bytes)],
        "stdin_open": True,
        "tty": False,
        "detach": True,
        "network_mode": "none",
        "read_only": True,
        "volumes": {stage_path: {"bind": CONTAINER_ROOT, "mode": "ro"}},
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={tmp_mb}m"},
        "working_dir": "/tmp",
        "user": SANDBOX_UID,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": f"{cfg.memory_mb}m",
        "memswap_limit": f"{cfg.memory_mb}m",
        "pids_limit": cfg.pids_limit,
        "nano_cpus": int(cfg.cpus * 1e9),
        "ipc_mode": "private",
        "environment": {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"},
        "log_config": LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
        "labels": {
            LABEL: "1",
            f"{LABEL}.role": "sandbox",
            f"{LABEL}.pid": str(os.getpid()),
            f"{LABEL}.started": _start_time(os.getpid()),
            f"{LABEL}.host": socket.gethostname(),
        },
    }


class DockerChannel(Channel):
    """The protocol over a container's attach socket (multiplexed stdout frames)."""

    def __init__(self, client: Any, container: Any, cfg: SandboxConfig) -> None:
        super().__init__(cfg.call_timeout_s, cfg.max_output_bytes)
        self.client = client
        self.container = container
        self.ident = container.id
        raw = client.api.attach_socket(container.id, params={"stdin": 1, "stdout": 1, "stream": 1})
        self._sock: _socket.socket = getattr(raw, "_sock", raw)
        self._raw_holder = raw  # keep the HTTP response alive
        self._frames = bytearray()
        self._killed = False

    def _send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def _recv(self, timeout: float) -> bytes | None:
        out = bytearray()
        while True:  # hand out payload of complete stdout frames
            if len(self._frames) >= 8:
                stream, size = self._frames[0], struct.unpack(">I", self._frames[4:8])[0]
                if len(self._frames) >= 8 + size:
                    if stream == 1:
                        out += self._frames[8 : 8 + size]
                    del self._frames[: 8 + size]
                    continue
            if out:
                return bytes(out)
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                return None
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                return b""
            self._frames += data

    def _diagnose(self) -> tuple[str, str]:
        """Why the server's stream ended, blamed on the right boundary.

        The daemon's OOMKilled flag -> oom (the env's doing); a `kill` event in the daemon's
        log for this container (docker kill / stop / rm -f) or a SIGKILL without the OOM flag
        -> killed (from outside, not the env's doing); the container gone -> removed; the daemon
        unreachable -> daemon_gone; any other exit -> crash (the env's server died).
        """
        import docker.errors

        removed = "removed", "the container was removed from outside (docker rm, or another process's sweep)"
        try:
            self.container.wait(timeout=5)
            self.container.reload()
            state = self.container.attrs.get("State", {})
            tail = self.container.logs(stdout=False, stderr=True, tail=5).decode("utf-8", "replace").strip()
        except docker.errors.NotFound:
            return removed
        except Exception as e:  # noqa: BLE001 - the daemon is away, or the container is being removed
            try:
                status = self.client.api.inspect_container(self.container.id).get("State", {}).get("Status")
            except docker.errors.NotFound:
                return removed
            except docker.errors.APIError:
                return removed  # 409: removal in progress
            except Exception:  # noqa: BLE001 - connection refused / reset / timed out
                return "daemon_gone", f"the Docker daemon stopped answering ({type(e).__name__})"
            if status in ("removing", "dead") or (isinstance(e, docker.errors.APIError) and e.status_code == 409):
                return removed
            return "crash", f"could not inspect the exited container ({type(e).__name__}: {str(e)[:200]})"
        code = state.get("ExitCode")
        if state.get("OOMKilled"):
            return (
                "oom",
                f"killed at the {self.container.attrs['HostConfig'].get('Memory', 0) // 2**20} MB memory limit (exit {code}, OOMKilled)",
            )
        signal = _kill_signal(self.client, self.container)
        if signal is not None:
            return (
                "killed",
                f"the container was killed from outside (signal {signal}, exit {code}; not the env's doing)",
            )
        if code == 137:
            return (
                "killed",
                "the server got SIGKILL (exit 137) without the daemon's OOMKilled flag: killed from outside",
            )
        return "crash", f"server exited with code {code}" + (f"; stderr: {tail[-500:]}" if tail else "")

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            remove_container(self.client, self.container.id)
        except Exception:  # noqa: BLE001, S110 - daemon unreachable: nothing to remove now; sweep() takes leftovers
            pass


def _kill_signal(client: Any, container: Any) -> str | None:
    """The signal of a `kill` event the daemon logged for this container (None: nobody killed it)."""
    created = str(container.attrs.get("Created", ""))[:19]
    try:
        since = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%S")) - 1 if created else int(time.time()) - 3600
        events = client.events(
            since=since, until=f"{time.time():.6f}", filters={"container": container.id, "event": "kill"}, decode=True
        )
        for event in events:
            return str(event.get("Actor", {}).get("Attributes", {}).get("signal", "?"))
    except Exception:  # noqa: BLE001 - no event log: fall back to the exit code
        return None
    return None


def remove_container(client: Any, container_id: str) -> None:
    import docker.errors

    try:
        client.api.remove_container(container_id, force=True)
        return
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as e:
        if "in progress" not in str(e):
            raise
    deadline = time.monotonic() + 10  # someone else is removing it: wait until it is gone
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return
        time.sleep(0.05)


def start_container(client: Any, cfg: SandboxConfig, stage_path: str) -> DockerChannel:
    """Create, attach and start one hardened container; wait until its server answers."""
    import docker.errors

    try:
        container = client.containers.create(**container_kwargs(cfg, stage_path))
    except docker.errors.ImageNotFound:
        raise SandboxError(image_missing(cfg.image)) from None
    except docker.errors.APIError as e:
        if e.status_code == 400:  # the settings the container asks for, never the env's doing
            raise SandboxError(
                f"Docker refused to create a sandbox container ({e.explanation}): fix the sandbox.* setting it names"
            ) from None
        raise
    except Exception as e:  # noqa: BLE001 - requests' connection errors: the daemon went away
        raise SandboxError(
            f"the Docker daemon stopped answering ({type(e).__name__}): check that dockerd runs, then resume"
        ) from None
    try:
        channel = DockerChannel(client, container, cfg)
        container.start()
        channel.call("ping", timeout=cfg.start_timeout_s)
    except BaseException:
        remove_container(client, container.id)
        raise
    return channel


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" when unknown): with the pid it
    names one process, so a recycled pid is not mistaken for the pool's owner."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
        return stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return ""


def _owner_alive(labels: dict[str, str]) -> bool:
    pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = labels.get(f"{LABEL}.started", "")
    return not started or not _start_time(pid) or _start_time(pid) == started


def list_containers(client: Any, label: str = LABEL) -> list[dict[str, Any]]:
    """gapforge containers as the daemon lists them (id, labels, state), in ONE call.

    Not `client.containers.list()`: it inspects every listed container afterwards, which
    fails with NotFound when another process removes one in between.
    """
    return client.api.containers(all=True, filters={"label": label})


def sweep(client: Any | None = None, *, everything: bool = False, only_pid: int | None = None) -> int:
    """Remove leftover gapforge containers; returns how many were removed.

    Default: containers of this host whose owning process (pid + start time) is gone: safe
    while other gapforge processes run their pools. `only_pid`: this process's own
    containers. `everything`: all gapforge-labelled containers. Containers that vanish
    meanwhile (another process removing them) are skipped, never an error.
    """
    client = client or docker_client()
    host = socket.gethostname()
    removed = 0
    for c in list_containers(client):
        labels = c.get("Labels") or {}
        pid = int(labels.get(f"{LABEL}.pid", "0") or 0)
        mine = labels.get(f"{LABEL}.host") == host
        if (
            everything
            or (only_pid is not None and mine and pid == only_pid)
            or (only_pid is None and mine and not _owner_alive(labels))
        ):
            remove_container(client, c["Id"])
            removed += 1
    return removed
