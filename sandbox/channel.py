"""Host side of the line-delimited JSON protocol, independent of the transport.

A Channel sends one request line and reads one response line under a deadline
(`call_timeout_s`) and a size cap (`max_output_bytes`). Transports (a Docker
attach socket, a subprocess pipe) only implement `_send`, `_recv` and
`_diagnose`. Any failure of the far side is raised as EnvCodeError and leaves
the channel `broken`: its owner must destroy it, never reuse it. When the
transport's diagnosis says the far side was lost to something outside the env
(killed or removed from outside, daemon gone) it is raised as SandboxLost.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from typing import Any

from gapforge.sandbox.errors import FAILURE_KINDS, INFRA_KINDS, EnvCodeError, EnvFailureKind, SandboxLost

# kinds the far side may report itself (timeout and crash are decided on this side)
_KINDS: dict[str, EnvFailureKind] = {k: k for k in FAILURE_KINDS if k not in ("timeout", "crash")}  # type: ignore[misc]


class Channel(ABC):
    def __init__(self, call_timeout_s: float, max_output_bytes: int) -> None:
        self.call_timeout_s = call_timeout_s
        self.max_output_bytes = max_output_bytes
        self.broken: EnvCodeError | SandboxLost | None = None
        self.had_failure = False  # any failure during this lease (incl. env exceptions)
        self._buf = bytearray()
        self._next_id = 0

    ident: str = ""  # container id or process id, for logs and tests

    # -- transport -----------------------------------------------------------
    @abstractmethod
    def _send(self, data: bytes) -> None: ...

    @abstractmethod
    def _recv(self, timeout: float) -> bytes | None:
        """Bytes of the server's stdout; b"" at EOF; None when nothing came within `timeout`."""

    @abstractmethod
    def _diagnose(self) -> tuple[str, str]:
        """After EOF: why did the far side die (an EnvFailureKind such as oom / crash, or an
        infrastructure kind of sandbox.errors.INFRA_KINDS) and with what evidence."""

    @abstractmethod
    def kill(self) -> None:
        """Stop the far side for good (idempotent)."""

    # -- protocol ------------------------------------------------------------
    def _fail(self, kind: str, detail: str, method: str) -> EnvCodeError | SandboxLost:
        err: EnvCodeError | SandboxLost
        err = (
            SandboxLost(kind, detail, method=method)
            if kind in INFRA_KINDS
            else EnvCodeError(kind, detail, method=method)
        )  # type: ignore[arg-type]
        self.broken = err
        self.had_failure = True
        self.kill()
        return err

    def _read_line(self, method: str, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line
            if len(self._buf) > self.max_output_bytes + 4096:
                raise self._fail("output_flood", f"response exceeded {self.max_output_bytes} bytes", method)
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail("timeout", f"no answer within {timeout:g}s", method)
            chunk = self._recv(left)
            if chunk is None:
                continue
            if chunk == b"":
                kind, detail = self._diagnose()
                raise self._fail(kind, detail, method)
            self._buf += chunk

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if isinstance(self.broken, SandboxLost):
            raise SandboxLost(self.broken.kind, f"sandbox unusable: {self.broken.detail}", method=method)  # type: ignore[arg-type]
        if self.broken is not None:
            raise EnvCodeError(
                "crash", f"sandbox unusable after an earlier failure ({self.broken.kind})", method=method
            )
        self._next_id += 1
        rid = self._next_id
        try:
            self._send((json.dumps({"id": rid, "method": method, "params": params or {}}) + "\n").encode())
        except OSError as e:
            kind, detail = self._diagnose()
            raise self._fail(kind, f"{detail} (write failed: {e})", method) from None
        line = self._read_line(method, self.call_timeout_s if timeout is None else timeout)
        try:
            resp = json.loads(line)
            ok = resp["ok"]
            if resp.get("id") != rid:
                raise ValueError(f"answer id {resp.get('id')!r} != request id {rid}")
        except (ValueError, KeyError, TypeError) as e:
            raise self._fail("bad_output", f"invalid protocol line ({e}): {line[:200]!r}", method) from None
        if ok:
            return resp.get("result")
        err = resp.get("error") or {}
        kind = _KINDS.get(str(err.get("type")))
        if kind is None:
            raise RuntimeError(f"sandbox protocol error: {err.get('message')}")  # a host-side bug
        self.had_failure = True
        exc = EnvCodeError(kind, str(err.get("message", "")), method=method, traceback=err.get("traceback"))
        if kind in ("oom", "output_flood"):  # the process may be in a bad state
            self.broken = exc
            self.kill()
        raise exc
