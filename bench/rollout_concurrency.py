"""Rollout collection throughput vs concurrency.

A local fake OpenAI-compatible server answers every chat request after a fixed
latency with a scripted tool call; the real collector (ChatOpenAI client,
policy loop, built-in shop env, SQLite store) collects the same kind of
episodes at several concurrency levels. Each episode is exactly `--turns`
policy requests, so the latency-bound ideal is concurrency / (turns * latency)
episodes per second. Prints episodes/s and the ratio to that ideal.

    python bench/rollout_concurrency.py [--latency 0.1] [--turns 4] [--levels 1,8,32,64]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from agents.llm import make_chat_model
from agents.policy import ChatModelPolicy
from agents.rollouts import CollectPlan, collect
from envs.registry import make_env
from gapforge.config import EndpointConfig
from serving.fake_openai import FakeOpenAIServer, tool_call_message
from store import Store


def responder(_req: dict) -> dict:
    return tool_call_message("find_customer_by_email", {"email": "nobody@example.com"})


def run_level(store: Store, base_url: str, concurrency: int, episodes: int, turns: int) -> float:
    probe = make_env("shop")
    tasks = probe.task_ids()
    probe.close()
    samples = -(-episodes // len(tasks))
    plan = CollectPlan(
        run_id=store.create_run("bench", {"concurrency": concurrency}),
        env="shop",
        tasks=tasks[: -(-episodes // samples)],
        samples=samples,
        concurrency=concurrency,
        max_turns=turns,
    )
    endpoint = EndpointConfig(base_url=base_url, model="fake", max_retries=0, timeout_s=30)
    policy = ChatModelPolicy(make_chat_model(endpoint), name="fake")
    t0 = time.perf_counter()
    result = asyncio.run(collect(plan, make_env=lambda: make_env("shop"), policy=policy, sink=store))
    elapsed = time.perf_counter() - t0
    rows = store.episodes(plan.run_id)
    bad = [r for r in rows if r.turns != turns]
    if bad:
        raise SystemExit(f"episodes with {bad[0].turns} turns (expected {turns}): {bad[0].termination} {bad[0].error}")
    return result.ran / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.1, help="server latency per request, seconds")
    ap.add_argument("--turns", type=int, default=4, help="policy requests per episode")
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--min-episodes", type=int, default=16)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(responder, latency_s=args.latency) as srv:
        store = Store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        print(f"fake server latency {args.latency * 1000:.0f} ms, {args.turns} requests per episode")
        print(f"{'concurrency':>11} {'episodes':>8} {'eps/s':>8} {'ideal':>8} {'ratio':>6}")
        for c in levels:
            episodes = max(args.min_episodes, 3 * c)
            eps = run_level(store, srv.base_url, c, episodes, args.turns)
            ideal = c / (args.turns * args.latency)
            print(f"{c:>11} {episodes:>8} {eps:>8.2f} {ideal:>8.2f} {eps / ideal:>6.2f}")
        store.close()


if __name__ == "__main__":
    main()
