"""Benchmark: router latency (one forward pass over the label tokens) vs producing the
label with `generate`, and the per-request overhead of the routed endpoint vs
calling the local backend directly.

    .venv/bin/python bench/router.py [--model DIR] [--repeats N] [--requests N]

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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.router import Router, RoutingConfig, make_options
from agents.router_backends import TransformersScorer
from envs.protocol import Message
from serving.routed_server import ROUTED_MODEL, RoutedApp, RoutedServer

CAPS = [
    {"name": "precondition_verification", "definition": "Check order status, return window, final-sale and ownership before acting.", "adapter": "a"},
    {"name": "structured_data_reasoning", "definition": "Read nested records and compute totals correctly.", "adapter": "b"},
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
                scorer.model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=scorer.tokenizer.pad_token_id)
        gen()
        g = [timed(gen) for _ in range(repeats)]
        print(f"generate {new:2d} token(s): p50 {p50(g) * 1e3:.1f} ms  -> ratio generate/route {p50(g) / p50(route):.1f}x")


class InstantBackend:
    """A backend that answers at once: isolates the endpoint's own overhead."""

    name = "base"

    @property
    def adapters(self) -> list[str]:
        return ["a"]

    async def respond(self, messages: list[Message], tools: list[dict[str, Any]], *, adapter: str | None, temperature: float, max_new_tokens: int | None) -> Message:
        return Message.assistant("ok")


def bench_overhead(requests: int) -> None:
    import httpx

    backend = InstantBackend()
    body = {"model": ROUTED_MODEL, "messages": [{"role": "user", "content": MESSAGE}], "temperature": 0}
    direct = []
    loop = asyncio.new_event_loop()
    msgs = [Message.user(MESSAGE)]
    for _ in range(requests):
        t = time.perf_counter()
        loop.run_until_complete(backend.respond(msgs, [], adapter="a", temperature=0.0, max_new_tokens=None))
        direct.append(time.perf_counter() - t)
    loop.close()

    class Decision:
        adapter = "a"

        def to_json(self) -> dict[str, Any]:
            return {"adapter": "a"}

    with RoutedServer(RoutedApp(backend, lambda _m: Decision())) as server, httpx.Client() as client:
        url = server.base_url + "/chat/completions"
        client.post(url, json=body)  # warm-up; routes once, then cached
        routed = []
        for _ in range(requests):
            t = time.perf_counter()
            r = client.post(url, json=body)
            routed.append(time.perf_counter() - t)
            assert r.status_code == 200
        import openai

        oc = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        oc.chat.completions.create(**body)
        sdk = []
        for _ in range(requests):
            t = time.perf_counter()
            oc.chat.completions.create(**body)
            sdk.append(time.perf_counter() - t)
    print(f"direct backend call: p50 {p50(direct) * 1e3:.3f} ms")
    print(f"routed endpoint (httpx, cached route): p50 {p50(routed) * 1e3:.2f} ms -> added {(p50(routed) - p50(direct)) * 1e3:.2f} ms")
    print(f"routed endpoint (openai client): p50 {p50(sdk) * 1e3:.2f} ms (client-side cost included)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, help="HF model dir (default: build the tiny model)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--requests", type=int, default=200)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = ns.model
        if model is None:
            from serving.tiny_model import build_tiny_model

            model = build_tiny_model(Path(tmp) / "tiny")
        bench_routing(model, ns.repeats)
    bench_overhead(ns.requests)


if __name__ == "__main__":
    main()
