"""The env server that runs INSIDE the sandbox (container or rlimited process).

Standard library only, plus envs/sdk.py staged beside it. It loads ONE env
module and answers line-delimited JSON requests on stdin:

    {"id": 1, "method": "reset", "params": {"seed": 3}}
 -> {"id": 1, "ok": true, "result": [...]}
 |  {"id": 1, "ok": false, "error": {"type": KIND, "message": "...", "traceback": "..."}}

Methods: ping, load, describe, tools, reset, step, score, solution, scenario
(the JSON scenario of a seed, for determinism/diversity checks). Many
episodes per process; exactly one module per process (a second `load` of
another module is refused: generated code may monkeypatch the interpreter or
leave files in /tmp, so a process never serves two modules — the host pool
starts blank processes instead).

The protocol channel is a private duplicate of the original stdout; fd 1 and
sys.stdout/sys.stderr are pointed at stderr, so the env's own prints (Python
or C level) never reach the channel. Python-level prints are capped per call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.abspath(__file__))


class OutputFlood(BaseException):
    """The env printed more than the per-call budget (BaseException: harder to swallow)."""


class _CappedWriter:
    """Stands in for sys.stdout/sys.stderr: forwards to fd 2 until the per-call budget runs out."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        self.used += len(data)
        if self.used > self.budget:
            raise OutputFlood(f"env printed more than {self.budget} bytes in one call")
        os.write(2, data)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _find_class(module: Any) -> type:
    from envs.sdk import find_env_class  # always staged beside this file (sandbox/mount.py)

    return find_env_class(module)


class Server:
    def __init__(self, proto_fd: int, max_output: int) -> None:
        self.proto_fd = proto_fd
        self.max_output = max_output
        self.env: Any = None
        self.info: dict[str, Any] = {}
        self.loaded_path: str | None = None

    # -- methods -------------------------------------------------------------
    def load(self, path: str) -> dict[str, Any]:
        full = os.path.normpath(os.path.join(ROOT, path))
        if self.loaded_path is not None:
            if full == self.loaded_path:
                return self.info
            raise RuntimeError("this sandbox already serves another module; start a fresh one")
        spec = importlib.util.spec_from_file_location("gapforge_env_module", full)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        cls = _find_class(module)
        self.env = cls()
        self.loaded_path = full
        meta = cls.metadata()  # a checked SyntheticEnv subclass (find_env_class)
        self.info = {key: meta[key] for key in ("name", "capability", "description", "target", "max_turns")}
        return self.info

    def dispatch(self, method: str, params: dict[str, Any]) -> Any:
        if method == "ping":
            return "pong"
        if method == "load":
            return self.load(str(params["path"]))
        if self.env is None:
            raise RuntimeError(f"'{method}' before 'load'")
        if method == "describe":
            return self.info
        if method == "tools":
            return self.env.tools()
        if method == "reset":
            return self.env.reset(int(params["seed"]))
        if method == "step":
            return self.env.step(params["message"])
        if method == "score":
            return self.env.score()
        if method == "solution":
            return self.env.solution(int(params["seed"]))
        if method == "scenario":
            return self.env.scenario_for(int(params["seed"]))
        raise ValueError(f"unknown method {method!r}")

    # -- loop ----------------------------------------------------------------
    def send(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.proto_fd, view) :]

    def error(self, rid: Any, kind: str, exc: BaseException) -> dict[str, Any]:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]
        message = f"{type(exc).__name__}: {exc}"[:2000]
        return {"id": rid, "ok": False, "error": {"type": kind, "message": message, "traceback": tb}}

    def handle(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
            rid, method, params = req.get("id"), req["method"], req.get("params") or {}
        except Exception as e:  # a host bug, not the env's fault
            return self.error(None, "protocol", e)
        writer = _CappedWriter(self.max_output)
        sys.stdout = sys.stderr = writer
        try:
            result = self.dispatch(method, params)
        except OutputFlood as e:
            return self.error(rid, "output_flood", e)
        except MemoryError as e:
            return self.error(rid, "oom", e)
        except BaseException as e:  # the env's failure is data (incl. SystemExit)
            return self.error(rid, "load_error" if method == "load" else "exception", e)
        finally:
            sys.stdout = sys.stderr = _CappedWriter(0)
        try:
            text = json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            return self.error(rid, "bad_output", e)
        if len(text) > self.max_output:
            return self.error(
                rid, "output_flood", OutputFlood(f"result of {len(text)} bytes exceeds {self.max_output}")
            )
        return {"id": rid, "ok": True, "result": result}

    def serve(self, stdin: Any) -> None:
        while True:
            line = stdin.readline()
            if not line:
                return
            if line.strip():
                self.send(self.handle(line))


def main(argv: list[str]) -> None:
    max_output = int(argv[1]) if len(argv) > 1 else 1_000_000
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # C-level and child-process writes to fd 1 go to stderr
    sys.stdout = sys.stderr = _CappedWriter(0)
    Server(proto_fd, max_output).serve(sys.stdin.buffer)


if __name__ == "__main__":
    main(sys.argv)
