"""The routed endpoint under overload, on a loopback port with the tiny model: a burst past `serving.max_queue` gets
429 + Retry-After and no 5xx; a request past `serving.request_timeout_s` gets a 504 with an OpenAI error body and its
generation is dropped; a client that disconnects has its row leave the batch mid-decode (counted, not timed); a
server cut at shutdown answers its requests in flight 503. The model is held still by holding its lock, so what is
queued is known, not raced."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gapforge.envs.protocol import Message
from gapforge.serving.batching import BatchGenerator
from gapforge.serving.config import ServeConfig
from gapforge.serving.multi_adapter import MultiAdapterModel
from gapforge.serving.routed_server import RoutedApp
from tests.fakes.routed_server import RoutedServer

HELLO = [{"role": "user", "content": "Cancel order 1012 please"}]


class Entered:
    """The backend, counting the requests that reached it (so a test knows what is queued without waiting on time)."""

    def __init__(self, backend: MultiAdapterModel) -> None:
        self.backend, self.name, self.adapters = backend, backend.name, backend.adapters
        self.cond = threading.Condition()
        self.count = 0

    async def respond(self, messages: list[Message], tools: list[dict[str, Any]], **kw: Any) -> Message:
        with self.cond:
            self.count += 1
            self.cond.notify_all()
        return await self.backend.respond(messages, tools, **kw)

    def wait_for(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.count >= n, timeout=60), (
                f"{self.count} of {n} requests reached the model"
            )


class CountingModel:
    """The model, with its forward calls counted; the 3rd call (prefill + 2 decode steps) says so and waits for `go`."""

    def __init__(self, model: Any) -> None:
        self.model, self.calls, self.rows = model, 0, []
        self.decoding, self.go = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, **kw: Any) -> Any:
        self.calls += 1
        self.rows.append(int(kw["input_ids"].shape[0]))
        if self.calls == 3:
            self.decoding.set()
            assert self.go.wait(60)
        return self.model(**kw)


@pytest.fixture
def backend(tiny_model_dir: Path) -> MultiAdapterModel:
    model = MultiAdapterModel(tiny_model_dir, {}, max_new_tokens=4000, name="tiny-base")
    yield model
    model._generation.batcher.close()


def _post(server: RoutedServer, max_tokens: int = 4) -> httpx.Response:
    body = {"model": "tiny-base", "messages": HELLO, "temperature": 0, "max_tokens": max_tokens}
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=120)


def test_a_burst_past_the_queue_gets_429_with_retry_after_and_no_5xx(backend: MultiAdapterModel) -> None:
    entered = Entered(backend)
    routed = RoutedApp(entered, None, limits=ServeConfig(max_queue=4))
    with RoutedServer(routed) as server, ThreadPoolExecutor(10) as pool:
        with backend._lock:  # the model decodes nothing: the first four stay queued
            held = [pool.submit(_post, server) for _ in range(4)]
            entered.wait_for(4)
            burst = [f.result() for f in [pool.submit(_post, server) for _ in range(6)]]
            client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="tiny-base", messages=HELLO, max_tokens=4)
        answered = [f.result() for f in held]
        health = httpx.get(server.base_url.removesuffix("/v1") + "/health").json()
    assert [r.status_code for r in burst] == [429] * 6
    for r in burst:
        assert int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["code"] == "queue_full" and "serving.max_queue=4" in r.json()["error"]["message"]
    assert refused.value.response.headers["Retry-After"].isdigit()
    assert [r.status_code for r in answered] == [200] * 4
    assert health["in_flight"] == 0 and health["counts"]["rejected"] == 7 and health["counts"]["answered"] == 4


def test_a_request_past_its_time_limit_gets_504_and_its_generation_is_dropped(backend: MultiAdapterModel) -> None:
    routed = RoutedApp(backend, None, limits=ServeConfig(request_timeout_s=0.3))
    batcher: BatchGenerator = backend._generation.batcher
    with RoutedServer(routed) as server:
        with backend._lock:  # the model cannot answer within the limit
            late = _post(server)
        batcher.close()  # the worker has finished with the request once it stops
    assert late.status_code == 504
    err = late.json()["error"]
    assert (
        err["type"] == "timeout_error"
        and err["code"] == "request_timeout"
        and "serving.request_timeout_s=0.3" in err["message"]
    )
    assert batcher.cancelled == {"waiting": 1, "decoding": 0}  # never decoded: dropped before its prefill
    assert (
        routed.admission.counts["timed_out"] == 1 and routed.admission.in_flight == 0
    )  # its place in the queue is free


def test_a_client_that_disconnects_has_its_row_dropped_mid_decode(backend: MultiAdapterModel) -> None:
    batcher: BatchGenerator = backend._generation.batcher
    counting = CountingModel(backend.model)
    batcher.model = counting
    routed = RoutedApp(backend, None)
    body = json.dumps({"model": "tiny-base", "messages": HELLO, "temperature": 0, "max_tokens": 3000}).encode()
    with RoutedServer(routed) as server:
        sock = socket.create_connection((server.host, server.port))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert counting.decoding.wait(60)
        sock.close()  # the client goes away while its row decodes
        counting.go.set()
        batcher.close()  # returns once the batch has ended
    assert batcher.cancelled == {"waiting": 0, "decoding": 1}
    assert counting.calls < 3000  # the row left long before its token limit (without the cancel: 3,000 forward calls)
    assert routed.admission.counts["disconnected"] == 1 and routed.admission.in_flight == 0


def test_a_cancelled_future_drops_its_row_at_the_next_step(tiny_model_dir: Path) -> None:
    backend = MultiAdapterModel(tiny_model_dir, {}, max_new_tokens=200)
    counting = CountingModel(backend.model)
    gen = BatchGenerator(counting, eos_ids=set())  # no eos: a row stops at its limit or when cancelled
    ids = backend.tokenizer("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
        "input_ids"
    ]
    future = gen.submit(ids, temperature=0.0, max_new_tokens=200, seed=0)
    assert counting.decoding.wait(60)
    assert future.cancel() is False  # running: it cannot be cancelled, it is abandoned
    counting.go.set()
    gen.close()
    with pytest.raises(CancelledError):
        future.result(0)
    assert counting.calls == 3 and gen.cancelled == {"waiting": 0, "decoding": 1}
    again = gen.submit(ids, temperature=0.0, max_new_tokens=5, seed=0).result(60)  # the generator goes on
    assert len(again) == 5
    gen.close()


def test_requests_in_flight_when_the_server_is_cut_get_503(backend: MultiAdapterModel) -> None:
    entered = Entered(backend)
    routed = RoutedApp(entered, None)
    with RoutedServer(routed) as server, ThreadPoolExecutor(1) as pool:
        with backend._lock:
            running = pool.submit(_post, server)
            entered.wait_for(1)
            server.call(routed.admission.drain)
            refused = _post(server)
            health = httpx.get(server.base_url.removesuffix("/v1") + "/health")
            server.call(routed.admission.cut)
            cut = running.result()
    assert (
        refused.status_code == 503
        and refused.json()["error"]["code"] == "server_shutting_down"
        and "Retry-After" in refused.headers
    )
    assert health.status_code == 503 and health.json()["status"] == "draining" and health.json()["in_flight"] == 1
    assert cut.status_code == 503 and cut.json()["error"]["code"] == "server_shutting_down"
    assert routed.admission.counts["cut"] == 1 and routed.admission.counts["refused_draining"] == 1
