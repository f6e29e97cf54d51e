"""A local stand-in for a vLLM OpenAI-compatible server with multi-LoRA, for tests
of the router's completions scorer and the routed endpoint's forwarding path
(no vLLM and no GPU here). It speaks the HTTP endpoints those paths use:

- POST /v1/completions with `prompt` as token ids (one list or a batch),
  `max_tokens: 1`, `logprob_token_ids` and `return_tokens_as_token_ids`: answers
  `choices[i].logprobs.top_logprobs[0] = {"token_id:N": logprob}` computed by
  `scorer(prompt_ids, token_ids)` (tests pass a real model's forward pass);
- POST /v1/chat/completions: `responder(request)` -> assistant message; a model
  name that is neither the base nor a loaded LoRA gets vLLM's 404;
- GET /v1/models: the base and every loaded LoRA name;
- POST /v1/load_lora_adapter {lora_name, lora_path} (runtime LoRA updating; `loader(name, path)`
  loads it into a real model, a ValueError is vLLM's 400).

A responder that raises ValueError gets vLLM's 400 with the message (e.g. a prompt longer than the
model's context). serving/vllm_standin.py backs this server with a real local model (`python -m
serving.vllm_standin MODEL_DIR [vllm serve flags]`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Scorer = Callable[[list[int], list[int]], list[float]]
Responder = Callable[[dict[str, Any]], dict[str, Any]]
Loader = Callable[[str, str], None]


class FakeVLLMServer:
    def __init__(self, base_model: str, *, scorer: Scorer | None = None, responder: Responder | None = None, loras: dict[str, str] | None = None,
                 loader: Loader | None = None, runtime_lora: bool = True, host: str = "127.0.0.1", port: int = 0) -> None:
        self.base_model = base_model
        self.scorer = scorer
        self.responder = responder or (lambda req: {"role": "assistant", "content": f"answer from {req['model']}"})
        self.loras: dict[str, str] = dict(loras or {})
        self.loader = loader
        self.runtime_lora = runtime_lora  # False: /v1/load_lora_adapter is a 404, as without VLLM_ALLOW_RUNTIME_LORA_UPDATING
        self.address = (host, port)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _completions(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prompt = body.get("prompt")
        if self.scorer is None or not isinstance(prompt, list):
            return 400, {"error": {"message": "this stand-in scores token-id prompts only"}}
        batch = prompt if prompt and isinstance(prompt[0], list) else [prompt]
        ids = [int(t) for t in body.get("logprob_token_ids") or []]
        choices = []
        for i, p in enumerate(batch):
            lps = self.scorer(p, ids)
            key = (lambda t: f"token_id:{t}") if body.get("return_tokens_as_token_ids") else str
            top = {key(t): lp for t, lp in zip(ids, lps)}
            best = max(top, key=top.get) if top else ""
            choices.append({"index": i, "text": "", "finish_reason": "length",
                            "logprobs": {"tokens": [best], "token_logprobs": [top.get(best)], "top_logprobs": [top], "text_offset": [0]}})
        return 200, {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()), "model": body.get("model"), "choices": choices}

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = body.get("model")
        if model != self.base_model and model not in self.loras:
            return 404, {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError"}}
        try:
            message = self.responder(body)
        except ValueError as e:
            return 400, {"error": {"message": str(e), "type": "BadRequestError"}}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return 200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": {}}

    def _load(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return 400, {"error": {"message": "lora_name and lora_path are required"}}
        with self._lock:
            if name in self.loras:
                return 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
            if self.loader is not None:
                try:
                    self.loader(name, path)
                except ValueError as e:
                    return 400, {"error": {"message": str(e)}}
            self.loras[name] = path
        return 200, {"message": f"Success: LoRA adapter '{name}' added successfully."}

    def __enter__(self) -> Self:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    ids = [outer.base_model, *outer.loras]
                    self._send(200, {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                path = self.path.rstrip("/")
                with outer._lock:
                    outer.requests.append((path, body))
                handlers = {"/v1/completions": outer._completions, "/v1/chat/completions": outer._chat}
                if outer.runtime_lora:
                    handlers["/v1/load_lora_adapter"] = outer._load
                if path not in handlers:
                    self._send(404, {"error": {"message": "not found"}})
                    return
                self._send(*handlers[path](body))

        self._server = ThreadingHTTPServer(self.address, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
