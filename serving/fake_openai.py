"""A small local server speaking the OpenAI chat-completions HTTP API, for
tests and benchmarks of the real client code paths (no LLM API is reachable here).

    with FakeOpenAIServer(responder, latency_s=0.1, fail_first=2) as srv:
    with FakeOpenAIServer(responder, fail_rate=0.2, seed=0) as srv:  # ~20% HTTP 500s, seeded
        ChatOpenAI(base_url=srv.base_url, ...)
    faults = Faults(rate_limit_rate=0.05, retry_after_s=0.2, garbage_rate=0.05, hang_rate=0.02, hang_s=5)
    with FakeOpenAIServer(responder, fail_rate=0.2, faults=faults, seed=0) as srv:
        srv.set_down(True)   # full outage: every connection is dropped without an answer
        srv.set_down(False)  # recovery

Fault injection (one seeded draw per request, the shares add up): `fail_rate`
-> `fail_status` (500); `rate_limit_rate` -> 429 with `Retry-After:
retry_after_s`; `garbage_rate` -> 200 whose body is not JSON; `hang_rate` ->
no answer for `hang_s` (the client's timeout fires). `injected` counts what was
injected, by kind.

`responder(request_json) -> assistant message dict` decides each answer (OpenAI
wire format: {"role": "assistant", "content": ..., "tool_calls": [...]}).
Binds 127.0.0.1 on a free port; stops with the context manager.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Responder = Callable[[dict[str, Any]], dict[str, Any]]


def text_reply(text: str) -> Responder:
    return lambda _req: {"role": "assistant", "content": text}


def tool_call_message(name: str, arguments: dict[str, Any], call_id: str = "call_0") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


def structured_reply(obj: dict[str, Any]) -> Responder:
    """Answer a structured-output request with `obj`: as the call of the bound tool (function
    calling) or as JSON content (response_format / json mode)."""

    def respond(req: dict[str, Any]) -> dict[str, Any]:
        if req.get("tools"):
            return tool_call_message(req["tools"][0]["function"]["name"], obj)
        return {"role": "assistant", "content": json.dumps(obj)}

    return respond


@dataclass(frozen=True)
class Faults:
    """Shares of requests answered with a fault (besides fail_rate's HTTP 500s)."""

    rate_limit_rate: float = 0.0
    retry_after_s: float = 1.0
    garbage_rate: float = 0.0
    hang_rate: float = 0.0
    hang_s: float = 30.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # many concurrent clients in benchmarks

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the client gave up on a hung answer (injected): not the server's problem
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    def __init__(
        self, responder: Responder, *, latency_s: float = 0.0, fail_first: int = 0, fail_status: int = 500,
        fail_rate: float = 0.0, seed: int = 0, faults: Faults | None = None,
    ) -> None:  # fmt: skip
        self.responder = responder
        self.faults = faults or Faults()
        self.injected: dict[str, int] = {}
        self._down = False
        self.fail_rate = fail_rate  # share of requests (after fail_first) answered with fail_status, drawn from `seed`
        self._rng = random.Random(seed)
        self.latency_s = latency_s
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header (tests: where keys go)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def set_down(self, down: bool) -> None:
        """A full outage: while down, every request's connection is dropped without an answer."""
        with self._lock:
            self._down = down

    def _draw(self, n: int) -> str | None:
        """Which fault (if any) answers request `n` (call under the lock)."""
        if self._down:
            return "down"
        if n <= self.fail_first:
            return "fail"
        f = self.faults
        if not (self.fail_rate or f.rate_limit_rate or f.garbage_rate or f.hang_rate):
            return None
        r = self._rng.random()
        for kind, share in (("fail", self.fail_rate), ("rate_limit", f.rate_limit_rate), ("garbage", f.garbage_rate), ("hang", f.hang_rate)):
            if r < share:
                return kind
            r -= share
        return None

    def _handle(self, body: dict[str, Any]) -> tuple[int, bytes | None, dict[str, str]]:
        """(status, body bytes or None to drop the connection, extra headers)."""
        with self._lock:
            self.requests.append(body)
            n = len(self.requests)
            fault = self._draw(n)
            if fault:
                self.injected[fault] = self.injected.get(fault, 0) + 1
        if fault == "down":
            return 0, None, {}
        if self.latency_s:
            time.sleep(self.latency_s)
        if fault == "hang":
            time.sleep(self.faults.hang_s)
        if fault == "fail":
            return self.fail_status, _json({"error": {"message": f"injected failure {n}", "type": "server_error"}}), {}
        if fault == "rate_limit":
            headers = {"Retry-After": f"{self.faults.retry_after_s:g}"}
            return 429, _json({"error": {"message": f"rate limited {n}", "type": "rate_limit"}}), headers
        if fault == "garbage":
            return 200, b"<html><body>502 Bad Gateway (proxy)</body></html>", {}
        message = self.responder(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return 200, _json({
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }), {}  # fmt: skip

    def __enter__(self) -> "FakeOpenAIServer":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: avoid the 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else _json(payload)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                with outer._lock:
                    outer.authorizations.append(self.headers.get("Authorization"))
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.authorizations.append(self.headers.get("Authorization"))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                status, payload, headers = outer._handle(body)
                if payload is None:  # outage: drop the connection unanswered
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(status, payload, headers)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def main(argv: list[str] | None = None) -> None:
    """Serve in a process of its own (benchmarks: keeps the server off the client's GIL).

    python -m serving.fake_openai --latency 0.1 --tool NAME --args '{"k": "v"}'
    Prints the base URL on its first line, then serves until killed.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="fake OpenAI chat-completions server")
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--tool", help="answer every request with a call of this tool")
    ap.add_argument("--args", default="{}", help="JSON arguments of that tool call")
    ap.add_argument("--text", default="ok", help="answer text when no --tool")
    ap.add_argument("--structured", help="answer structured-output requests with this JSON object")
    ns = ap.parse_args(argv)
    responder = (lambda _r: tool_call_message(ns.tool, json.loads(ns.args))) if ns.tool else text_reply(ns.text)
    if ns.structured:
        responder = structured_reply(json.loads(ns.structured))
    with FakeOpenAIServer(responder, latency_s=ns.latency) as srv:
        print(srv.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        sys.stdout.flush()


if __name__ == "__main__":
    main()
