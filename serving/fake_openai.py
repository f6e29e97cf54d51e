"""A small local server speaking the OpenAI chat-completions HTTP API, for
tests and benchmarks of the real client code paths (no LLM API is reachable here).

    with FakeOpenAIServer(responder, latency_s=0.1, fail_first=2) as srv:
    with FakeOpenAIServer(responder, fail_rate=0.2, seed=0) as srv:  # ~20% HTTP 500s, seeded
        ChatOpenAI(base_url=srv.base_url, ...)

`responder(request_json) -> assistant message dict` decides each answer (OpenAI
wire format: {"role": "assistant", "content": ..., "tool_calls": [...]}).
Binds 127.0.0.1 on a free port; stops with the context manager.
"""

from __future__ import annotations

import json
import random
import threading
import time
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # many concurrent clients in benchmarks


class FakeOpenAIServer:
    def __init__(
        self, responder: Responder, *, latency_s: float = 0.0, fail_first: int = 0, fail_status: int = 500,
        fail_rate: float = 0.0, seed: int = 0,
    ) -> None:  # fmt: skip
        self.responder = responder
        self.fail_rate = fail_rate  # share of requests (after fail_first) answered with fail_status, drawn from `seed`
        self._rng = random.Random(seed)
        self.latency_s = latency_s
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.requests: list[dict[str, Any]] = []
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

    def _handle(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            n = len(self.requests)
            injected = n <= self.fail_first or (self.fail_rate > 0 and self._rng.random() < self.fail_rate)
        if self.latency_s:
            time.sleep(self.latency_s)
        if injected:
            return self.fail_status, {"error": {"message": f"injected failure {n}", "type": "server_error"}}
        message = self.responder(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return 200, {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def __enter__(self) -> "FakeOpenAIServer":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: avoid the 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                status, payload = outer._handle(body)
                self._send(status, payload)

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
