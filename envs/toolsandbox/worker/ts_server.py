"""The ToolSandbox worker: line-delimited JSON on stdin/stdout, one process per env instance, run by ToolSandbox's
python (`python ts_server.py`), never imported by gapforge. Same wire shape as sandbox/server.py:

    {"id": 1, "method": "reset", "params": {...}}
 -> {"id": 1, "ok": true, "result": {...}}
 |  {"id": 1, "ok": false, "error": {"type": KIND, "message": "...", "traceback": "..."}}

Methods: ping, catalog, reset, step, score, close; reset takes `network` ("off" | "stand-in": RapidAPI answered from
stand-in data, ts_standin.py). KIND: "bad_request" (the host asked for something that does not exist) or "exception".
The protocol channel is a duplicate of the original stdout; fd 1 and sys.stdout point at stderr so ToolSandbox's
prints never reach it. A script that extends `Worker` (more methods: override `dispatch`) serves with `main(itself)`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings
from typing import Any

ROOT = os.path.dirname(os.path.abspath(__file__))


class BadRequest(Exception):
    pass


class Worker:
    def __init__(self) -> None:
        import ts_scenarios  # heavy: imports tool_sandbox (polars, nltk, ...)

        self.sc = ts_scenarios
        self._catalog: dict[str, Any] | None = None
        self.episode: Any = None

    def catalog(self) -> dict[str, Any]:
        if self._catalog is None:
            self._catalog = self.sc.catalog()
        return self._catalog

    def _entry(self, name: str) -> dict[str, Any]:
        for entry in self.catalog()["scenarios"]:
            if entry["name"] == name:
                return entry
        raise BadRequest(f"unknown scenario {name!r}")

    def _user(self, spec: dict[str, Any]) -> Any:
        from ts_episode import GuardedUser
        from ts_roles import EndpointUser, ScriptedUser

        kind = spec.get("kind", "scripted")
        if kind == "scripted":
            return GuardedUser(ScriptedUser(spec.get("replies")))
        if kind == "llm":
            model, base_url, key = spec["model"], spec.get("base_url"), spec.get("api_key") or ""
            timeout_s, retries = float(spec.get("timeout_s", 120)), int(spec.get("max_retries", 2))
            return GuardedUser(EndpointUser(model, base_url, key, timeout_s, retries))
        raise BadRequest(f"unknown user kind {kind!r}")

    def _module(self, scenario: str, module: str | None) -> str:
        """The scenario's defining module: given by the host (which caches the catalogue) or looked up."""
        if module in self.sc.BUILDERS:
            return str(module)
        return str(self._entry(scenario)["module"])

    @staticmethod
    def _network(mode: str) -> None:
        import ts_standin

        if mode not in ("off", "stand-in"):
            raise BadRequest(f"unknown network mode {mode!r}")
        ts_standin.use(mode)

    def reset(
        self, scenario: str, seed: int, user: dict[str, Any], module: str | None = None, network: str = "off"
    ) -> dict[str, Any]:
        from ts_episode import Episode

        self.close()
        self._network(network)
        built = self.sc.build(self._module(scenario, module), scenario, int(seed))
        self.episode = Episode(scenario, built, self._user(user or {}))
        return self.episode.start()

    def _live(self) -> Any:
        if self.episode is None:
            raise BadRequest("no episode: call reset first")
        return self.episode

    def step(self, message: dict[str, Any]) -> dict[str, Any]:
        episode = self._live()
        if episode.done:
            raise BadRequest("the episode is over: call reset for a new one")
        return episode.answer(message)

    def close(self) -> None:
        if self.episode is not None:
            self.episode.stop()
            self.episode = None

    def dispatch(self, method: str, p: dict[str, Any]) -> Any:
        if method == "ping":
            return "pong"
        if method == "catalog":
            return self.catalog()
        if method == "reset":
            return self.reset(
                p["scenario"], p.get("seed", 0), p.get("user") or {}, p.get("module"), p.get("network", "off")
            )
        if method == "step":
            return self.step(p["message"])
        if method == "score":
            from ts_standin import report

            return {**self._live().evaluate(), "stand_in_network": report()}
        if method == "close":
            self.close()
            return None
        raise BadRequest(f"unknown method {method!r}")


def _error(rid: Any, kind: str, exc: BaseException) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-6000:]
    return {
        "id": rid,
        "ok": False,
        "error": {"type": kind, "message": f"{type(exc).__name__}: {exc}"[:1000], "traceback": tb},
    }


def main(worker_class: type[Worker] = Worker) -> None:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    worker = worker_class()
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            reply = {"id": rid, "ok": True, "result": worker.dispatch(req["method"], req.get("params") or {})}
        except (BadRequest, KeyError, TypeError) as exc:
            reply = _error(rid, "bad_request", exc)
        except Exception as exc:  # noqa: BLE001 — reported to the host, the worker keeps serving
            reply = _error(rid, "exception", exc)
        proto.write(json.dumps(reply, default=str) + "\n")
    worker.close()


if __name__ == "__main__":
    main()
