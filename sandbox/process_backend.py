"""`sandbox.backend: process` — the env server in a plain subprocess with rlimits.

THIS DOES NOT ISOLATE: the env can read the user's files, reach the network
and see anything the user can. It exists for machines without Docker and is
used only when the config asks for it explicitly; every start logs a warning.
Limits: address space (memory_mb), CPU seconds, file size, process count (not
enforced for root), an empty environment, its own process group (killed as a
whole), a private working directory, and the same host-side timeouts and
output caps as the Docker backend.
"""

from __future__ import annotations

import logging
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from gapforge.sandbox.channel import Channel
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.errors import EnvFailureKind

log = logging.getLogger(__name__)
WARNING = (
    "sandbox.backend=process runs generated env code WITHOUT ISOLATION (no network, filesystem or secret protection); "
    "use the docker backend for untrusted code"
)


def _apply_limits(pid: int, cfg: SandboxConfig) -> None:
    """Set the child's rlimits from the parent with prlimit(2). The server loads no env code
    until the first request, which is sent only after this returns; a preexec_fn would do
    the same in the forked child, but that is unsafe while other threads run (the pool's
    refill thread)."""
    mem = cfg.memory_mb * 2**20
    cpu = int(max(60, 20 * cfg.call_timeout_s))
    for limit, value in (
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_CPU, (cpu, cpu + 5)),
        (resource.RLIMIT_FSIZE, (64 * 2**20, 64 * 2**20)),
        (resource.RLIMIT_NPROC, (cfg.pids_limit, cfg.pids_limit)),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.prlimit(pid, limit, value)


class ProcessChannel(Channel):
    def __init__(self, cfg: SandboxConfig, stage_path: str) -> None:
        super().__init__(cfg.call_timeout_s, cfg.max_output_bytes)
        log.warning(WARNING)
        self._workdir = tempfile.mkdtemp(prefix="gapforge-proc-")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(Path(stage_path) / "server.py"), str(cfg.max_output_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self._workdir,
            env={"PATH": "/usr/bin:/bin", "HOME": self._workdir, "TMPDIR": self._workdir},
            start_new_session=True,
        )
        try:
            _apply_limits(self.proc.pid, cfg)
        except OSError:
            self.proc.kill()
            raise
        self.ident = str(self.proc.pid)
        self._dead = False

    def _send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _recv(self, timeout: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return None
        return os.read(fd, 1 << 16)

    def _diagnose(self) -> tuple[EnvFailureKind, str]:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "crash", "server closed its output but did not exit"
        if code == -signal.SIGXCPU or code == -signal.SIGKILL:
            return "timeout", f"server killed by signal {-code} (CPU limit)"
        return "crash", f"server exited with code {code}"

    def kill(self) -> None:
        if self._dead:
            return
        self._dead = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        import shutil

        shutil.rmtree(self._workdir, ignore_errors=True)


def start_process(cfg: SandboxConfig, stage_path: str) -> ProcessChannel:
    channel = ProcessChannel(cfg, stage_path)
    try:
        channel.call("ping", timeout=cfg.start_timeout_s)
    except BaseException:
        channel.kill()
        raise
    return channel
