"""Errors at the sandbox boundary.

SandboxError (a `gapforge.faults.SandboxFault`): the machine is not set up (no Docker
daemon, image missing, bad limits); the message says what to fix and the CLI
prints it as one line, exit 2.

EnvCodeError: the env module itself failed (raised, hung, ran out of memory,
flooded output, answered garbage, crashed, or did not load). It is blamed on
the env (`gapforge.faults.EnvCodeFault`), never on the sandbox that ran it. This is
*data*: the validator records a failed check, a rollout gets zero reward, the
pipeline goes on.

SandboxLost: the sandbox died for a reason that is not the env's doing (the
container was killed or removed from outside, the Docker daemon went away).
It is a SandboxError, so the checks never count it against the env;
SandboxedEnv first retries the call on a fresh sandbox (replaying the episode).
Past the retries it is infrastructure (`infrastructure = True`, exit 3: resumable).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from gapforge.faults import EnvCodeFault, SandboxFault

EnvFailureKind = Literal["exception", "timeout", "oom", "bad_output", "output_flood", "crash", "load_error"]
FAILURE_KINDS: tuple[str, ...] = ("exception", "timeout", "oom", "bad_output", "output_flood", "crash", "load_error")


class SandboxError(SandboxFault):
    """The sandbox cannot run (setup problem). The message says what to fix."""


class EnvCodeError(EnvCodeFault):
    """The env module failed; `kind` says how, `detail` holds its error text / evidence."""

    def __init__(
        self, kind: EnvFailureKind, detail: str, *, method: str | None = None, traceback: str | None = None
    ) -> None:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown EnvCodeError kind {kind!r}")
        self.kind = kind
        self.detail = detail
        self.method = method
        self.traceback = traceback
        where = f" in {method}()" if method else ""
        super().__init__(f"env {kind}{where}: {detail}")

    def to_dict(self) -> dict[str, str | None]:
        """Plain evidence for reports and the store."""
        return {"kind": self.kind, "detail": self.detail, "method": self.method, "traceback": self.traceback}

    def naming(self, module_path: str | Path) -> EnvCodeError:
        """This error with the sandbox's copy of the module (`/.../modules/<sha256[:16]>.py`, sandbox.mount) named by
        the path the user gave: a SyntaxError or a traceback then points at their file (the line numbers are the
        same). Unchanged when it names no copy."""
        fix = lambda text: text and _COPY.sub(lambda _copy: str(module_path), text)  # noqa: E731
        if not _COPY.search(self.detail + (self.traceback or "")):
            return self
        return EnvCodeError(self.kind, fix(self.detail), method=self.method, traceback=fix(self.traceback))


_COPY = re.compile(r"""(?:/[^\s"'()=:,]*)?/modules/[0-9a-f]{16}\.py|\b[0-9a-f]{16}\.py\b""")  # the copy, with its path


InfraFailureKind = Literal["killed", "removed", "daemon_gone"]
INFRA_KINDS: tuple[str, ...] = ("killed", "removed", "daemon_gone")


class SandboxLost(SandboxError):
    """The sandbox was lost to something outside the env (kill, removal, daemon); `kind` says which."""

    exit_code = 3
    infrastructure = True

    def __init__(self, kind: InfraFailureKind, detail: str, *, method: str | None = None) -> None:
        if kind not in INFRA_KINDS:
            raise ValueError(f"unknown SandboxLost kind {kind!r}")
        self.kind = kind
        self.detail = detail
        self.method = method
        where = f" during {method}()" if method else ""
        super().__init__(f"sandbox {kind}{where}: {detail}")

    def to_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "detail": self.detail, "method": self.method, "blame": "sandbox"}


NO_DAEMON = "no Docker daemon reachable: start dockerd or set sandbox.backend: process (no isolation)"


def image_missing(tag: str) -> str:
    return f"sandbox image '{tag}' not found: run `gapforge sandbox build-image`"
