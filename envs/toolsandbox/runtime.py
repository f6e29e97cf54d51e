"""Host side of the ToolSandbox worker: find ToolSandbox's own python, run one worker process, talk to it.

ToolSandbox's pins (langchain 0.1, langchain-core < 0.3, polars 0.20) conflict with
gapforge's, so it lives in a venv of its own (`make toolsandbox-env`, see
envs/toolsandbox/install.py). Each env instance owns one worker process
(worker/ts_server.py) that speaks line-delimited JSON on its stdin/stdout; its
stderr (ToolSandbox's own output) goes to a temporary log whose tail is quoted when
the worker dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.faults import EnvCodeFault

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "worker" / "ts_server.py"
PYTHON_ENV_VAR = "GAPFORGE_TOOLSANDBOX_PYTHON"
DEFAULT_VENV = REPO / ".toolsandbox-venv"


class WorkerError(EnvCodeFault, RuntimeError):
    """The ToolSandbox worker process died, hung or answered garbage (not the agent's or the user's fault)."""


class WorkerRequestError(EnvCodeFault, RuntimeError):
    """The worker refused a request (a host-side bug, e.g. step after the episode ended)."""


def toolsandbox_python() -> Path | None:
    """The python of ToolSandbox's environment: $GAPFORGE_TOOLSANDBOX_PYTHON, else <repo>/.toolsandbox-venv."""
    configured = os.environ.get(PYTHON_ENV_VAR)
    path = Path(configured) if configured else DEFAULT_VENV / "bin" / "python"
    return path if path.exists() else None


def missing_reason() -> str | None:
    """None when ToolSandbox's environment is installed, else a one-line hint saying what to do."""
    if toolsandbox_python() is None:
        where = os.environ.get(PYTHON_ENV_VAR) or str(DEFAULT_VENV)
        return (
            f"ToolSandbox's environment is not installed ({where} missing): run "
            "`make toolsandbox-env TOOLSANDBOX_SRC=PATH` with PATH a clone of github.com/apple/ToolSandbox "
            f"(docs/install.md), or set {PYTHON_ENV_VAR} to the python of an existing ToolSandbox venv"
        )
    return None


class WorkerProcess:
    """One ToolSandbox worker running `script` (worker/ts_server.py, or a script that extends its `Worker`);
    `call(method, **params)` -> result. Not thread-safe (one episode per env)."""

    def __init__(self, *, script: Path = WORKER, start_timeout_s: float = 120.0, call_timeout_s: float = 600.0) -> None:
        python = toolsandbox_python()
        if python is None:
            raise EnvError(missing_reason() or "ToolSandbox's environment is missing")
        self.call_timeout_s = call_timeout_s
        self._log = tempfile.NamedTemporaryFile(prefix="toolsandbox-worker-", suffix=".log", delete=False)  # noqa: SIM115 — lives as long as the worker
        env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTHONPATH", None)  # the worker must see ToolSandbox's packages only
        self.proc = subprocess.Popen(
            [str(python), str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        self._buf = bytearray()
        self._next = 0
        self.broken: str | None = None
        self.call("ping", _timeout=start_timeout_s)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _log_tail(self) -> str:
        try:
            text = Path(self._log.name).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-3:])[-400:]

    def _fail(self, what: str) -> WorkerError:
        self.broken = what
        tail = self._log_tail()
        self.close()
        return WorkerError(
            f"ToolSandbox worker (pid {self.proc.pid}) {what}" + (f"; its log ends: {tail}" if tail else "")
        )

    def _read_line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise self._fail(f"gave no answer within {self.call_timeout_s:g}s")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise self._fail(f"exited (code {self.proc.poll()})")
                self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    def call(self, method: str, _timeout: float | None = None, **params: Any) -> Any:
        if self.broken is not None:
            raise WorkerError(f"ToolSandbox worker unusable after an earlier failure ({self.broken})")
        self._next += 1
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"id": self._next, "method": method, "params": params}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise self._fail(f"could not be written to ({exc})") from None
        line = self._read_line(time.monotonic() + (_timeout or self.call_timeout_s))
        try:
            reply = json.loads(line)
            ok, rid = reply["ok"], reply.get("id")
        except (ValueError, KeyError, TypeError):
            raise self._fail(f"answered a non-protocol line: {line[:200]!r}") from None
        if rid != self._next:
            raise self._fail(f"answered request {rid!r} instead of {self._next}")
        if ok:
            return reply.get("result")
        err = reply.get("error") or {}
        if err.get("type") == "bad_request":
            raise WorkerRequestError(f"ToolSandbox worker refused {method}: {err.get('message')}")
        raise WorkerError(f"ToolSandbox worker failed in {method}: {err.get('message')}")

    def close(self) -> None:
        """Stop the worker (idempotent): close its stdin, then terminate / kill if it lingers."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
                self.proc.wait(timeout=0.5)  # it holds no state worth a clean shutdown
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)
