"""Benchmark: router latency (one forward pass over the label tokens) vs producing the
label with `generate`, and the per-request overhead of the routed endpoint vs
calling the backend directly (an instant backend: the endpoint's own cost; and the
real local transformers backend, 1 new token).

    .venv/bin/python -m bench.router [--model DIR] [--repeats N] [--requests N]

Targets (issue 12): routing >= 5x faster than generating the label; routed
endpoint adds <= 5 ms at p50. Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from gapforge.agents.router import Router, RoutingConfig, TransformersScorer, make_options
from gapforge.envs.protocol import Message
from gapforge.serving.routed_server import ROUTED_MODEL, RoutedApp
from tests.fakes.routed_server import RoutedServer

CAPS = [
    {
        "name": "precondition_verification",
        "definition": "Check order status, return window, final-sale and ownership before acting.",
        "adapter": "a",
    },
    {
        "name": "structured_data_reasoning",
        "definition": "Read nested records and compute totals correctly.",
        "adapter": "b",
    },
    {"name": "tool_calling_precision", "definition": "Call tools with exactly the right arguments.", "adapter": "c"},
    {"name": "multi_step_task_completion", "definition": "Finish every step of a compound request.", "adapter": "d"},
]
MESSAGE = "I want to return the blender from order 1007, it arrived broken."


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def bench_routing(model_dir: Path, repeats: int) -> None:
    import torch

    scorer = TransformersScorer.from_pretrained(model_dir)
    router = Router(make_options(CAPS, RoutingConfig().labels), scorer)
    prompt = scorer.render(router.messages(MESSAGE))
    ids = scorer.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
    router.route(MESSAGE)  # warm-up

    def timed(fn: Any) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    route = [timed(lambda: router.route(MESSAGE)) for _ in range(repeats)]
    print(f"routing prompt: {ids['input_ids'].shape[1]} tokens, {len(router.labels)} labels")
    print(f"route (one forward pass): p50 {p50(route) * 1e3:.1f} ms")
    for new in (1, 4, 16):

        def gen(n: int = new) -> None:
            with torch.inference_mode():
                scorer.model.generate(
                    **ids,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    do_sample=False,
                    pad_token_id=scorer.tokenizer.pad_token_id,
                )

        gen()
        g = [timed(gen) for _ in range(repeats)]
        print(
            f"generate {new:2d} token(s): p50 {p50(g) * 1e3:.1f} ms  -> ratio generate/route {p50(g) / p50(route):.1f}x"
        )


class InstantBackend:
    """A backend that answers at once: isolates the endpoint's own overhead."""

    name = "base"

    @property
    def adapters(self) -> list[str]:
        return ["a"]

    async def respond(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        adapter: str | None,
        temperature: float,
        max_new_tokens: int | None,
    ) -> Message:
        return Message.assistant("ok")


class Decision:
    adapter = "a"

    def to_json(self) -> dict[str, Any]:
        return {"adapter": "a"}


def serve_instant() -> None:
    """Child process: the routed endpoint over the instant backend (keeps the server off the client's GIL)."""
    import threading

    with RoutedServer(RoutedApp(InstantBackend(), lambda _m: Decision())) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


class BaseDecision:
    adapter = None

    def to_json(self) -> dict[str, Any]:
        return {"adapter": None}


def bench_local_overhead(model_dir: Path, requests: int) -> None:
    """The routed endpoint over the REAL local transformers backend (1 new token, greedy) vs calling that
    same backend object directly, both on the server's event loop (so both generate on the same executor
    threads: torch's OpenMP workers of another thread, or process, spin after each call and would steal the 2
    cores from the one measured). Calls are interleaved so load drift hits both alike."""
    import httpx

    from gapforge.serving.multi_adapter import MultiAdapterModel

    backend = MultiAdapterModel(model_dir, {}, max_new_tokens=1, name="base")
    body = {
        "model": ROUTED_MODEL,
        "messages": [{"role": "user", "content": MESSAGE}],
        "temperature": 0,
        "max_tokens": 1,
    }
    msgs = [Message.user(MESSAGE)]
    with RoutedServer(RoutedApp(backend, lambda _m: BaseDecision())) as server, httpx.Client(timeout=60) as client:
        url = server.base_url
        client.post(url + "/chat/completions", json=body)  # warm-up; routes once, then cached

        def call_direct() -> None:
            loop = server._loop  # the server's own loop (a bench may peek)
            assert loop is not None
            asyncio.run_coroutine_threadsafe(backend.respond(msgs, [], adapter=None, temperature=0.0), loop).result()

        call_direct()
        direct, http = [], []
        for _ in range(requests):
            t = time.perf_counter()
            call_direct()
            direct.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = client.post(url + "/chat/completions", json=body)
            http.append(time.perf_counter() - t)
            assert r.status_code == 200
    print(
        f"local transformers backend (1 new token): direct p50 {p50(direct) * 1e3:.2f} ms; routed endpoint over HTTP p50 "
        f"{p50(http) * 1e3:.2f} ms -> added {(p50(http) - p50(direct)) * 1e3:.2f} ms at p50 ({requests} interleaved pairs)"
    )


def bench_overhead(requests: int) -> None:
    import subprocess

    import httpx
    import openai

    backend = InstantBackend()
    body = {"model": ROUTED_MODEL, "messages": [{"role": "user", "content": MESSAGE}], "temperature": 0}
    msgs = [Message.user(MESSAGE)]
    routed = RoutedApp(backend, lambda _m: Decision())

    class Req:  # the handler alone, no HTTP
        headers: ClassVar[dict[str, str]] = {}

        async def json(self) -> dict[str, Any]:
            return body

    async def timings() -> tuple[list[float], list[float]]:
        direct, handler = [], []
        for _ in range(requests):
            t = time.perf_counter()
            await backend.respond(msgs, [], adapter="a", temperature=0.0, max_new_tokens=None)
            direct.append(time.perf_counter() - t)
            t = time.perf_counter()
            await routed.chat(Req())  # type: ignore[arg-type]
            handler.append(time.perf_counter() - t)
        return direct, handler

    direct, handler = asyncio.run(timings())
    proc = subprocess.Popen([sys.executable, __file__, "--serve-instant"], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        with httpx.Client() as client:
            client.post(url + "/chat/completions", json=body)  # warm-up; routes once, then cached
            http = []
            for _ in range(requests):
                t = time.perf_counter()
                r = client.post(url + "/chat/completions", json=body)
                http.append(time.perf_counter() - t)
                assert r.status_code == 200
        oc = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        oc.chat.completions.create(**body)
        sdk = []
        for _ in range(requests):
            t = time.perf_counter()
            oc.chat.completions.create(**body)
            sdk.append(time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait(10)
    print(
        f"direct backend call: p50 {p50(direct) * 1e3:.3f} ms; endpoint handler alone (parse, route cache, answer): p50 {p50(handler) * 1e3:.3f} ms"
    )
    print(
        f"routed endpoint over HTTP (httpx, server in its own process, cached route): p50 {p50(http) * 1e3:.2f} ms"
        f" -> added {(p50(http) - p50(direct)) * 1e3:.2f} ms"
    )
    print(f"routed endpoint (openai client): p50 {p50(sdk) * 1e3:.2f} ms (client-side cost included)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, help="HF model dir (default: build the tiny model)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--serve-instant", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--local-only", action="store_true", help="only the overhead over the local transformers backend")
    ap.add_argument("--skip-routing", action="store_true", help="only the endpoint overhead")
    ns = ap.parse_args()
    if ns.serve_instant:
        serve_instant()
        return
    if ns.skip_routing:
        bench_overhead(ns.requests)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = ns.model
        if model is None:
            from gapforge.serving.tiny_model import build_tiny_model

            model = build_tiny_model(Path(tmp) / "tiny")
        if not ns.local_only:
            bench_routing(model, ns.repeats)
        bench_local_overhead(model, max(20, ns.requests // 4))
        if ns.local_only:
            return
    bench_overhead(ns.requests)


if __name__ == "__main__":
    main()
