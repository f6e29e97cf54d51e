"""Rollout collection throughput vs concurrency.

A local fake OpenAI-compatible server answers every chat request after a fixed
latency with a scripted tool call; the real collector (ChatOpenAI client,
policy loop, built-in shop env, SQLite store) collects the same kind of
episodes at several concurrency levels. Each episode is exactly `--turns`
policy requests, so the latency-bound ideal is concurrency / (turns * latency)
episodes per second. Prints episodes/s, the ratio to that ideal, and the client's CPU per policy
request (the whole collector process: episode loop, env, store writes; load-independent up to noise).

    python -m bench.rollout_concurrency [--latency 0.1] [--turns 4] [--levels 1,8,32,64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.envs.registry import make_env
from gapforge.serving.openai_policy import EndpointPolicy
from gapforge.store import Store

ROOT = Path(__file__).resolve().parents[1]  # `-m tests.fakes.fake_openai` runs from here (tests/ is not installed)


@contextmanager
def fake_server(latency: float):
    """The fake OpenAI server in a process of its own, so it does not share the client's GIL."""
    cmd = [
        sys.executable,
        "-m",
        "tests.fakes.fake_openai",
        "--latency",
        str(latency),
        "--tool",
        "find_customer_by_email",
        "--args",
        json.dumps({"email": "nobody@example.com"}),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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
    policy = EndpointPolicy(base_url, "fake", max_retries=0, timeout_s=30)

    async def collect_then_close():
        try:
            return await collect(plan, make_env=lambda: make_env("shop"), policy=policy, sink=store)
        finally:
            await policy.aclose()  # on the loop that used it (no "Unclosed client session" at exit)

    t0, cpu0 = time.perf_counter(), time.process_time()
    result = asyncio.run(collect_then_close())
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    rows = store.episodes(plan.run_id)
    bad = [r for r in rows if r.turns != turns]
    if bad:
        raise SystemExit(f"episodes with {bad[0].turns} turns (expected {turns}): {bad[0].termination} {bad[0].error}")
    policy_ms = 1000 * sum(r.timings["policy_s"] for r in rows) / sum(r.turns for r in rows)
    env_ms = 1000 * sum(r.timings["env_s"] for r in rows) / len(rows)
    return result.ran / elapsed, cpu / elapsed, policy_ms, env_ms, 1000 * cpu / sum(r.turns for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.1, help="server latency per request, seconds")
    ap.add_argument("--turns", type=int, default=4, help="policy requests per episode")
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--min-episodes", type=int, default=16)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp, fake_server(args.latency) as base_url:
        store = Store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        print(f"fake server latency {args.latency * 1000:.0f} ms, {args.turns} requests per episode")
        print(
            f"{'concurrency':>11} {'episodes':>8} {'eps/s':>8} {'ideal':>8} {'ratio':>6} {'client CPU':>10} {'CPU ms/req':>10} "
            f"{'ms/request':>10} {'env ms/ep':>9}"
        )
        for c in levels:
            episodes = max(args.min_episodes, 3 * c)
            eps, cpu_share, policy_ms, env_ms, cpu_ms = run_level(store, base_url, c, episodes, args.turns)
            ideal = c / (args.turns * args.latency)
            print(
                f"{c:>11} {episodes:>8} {eps:>8.2f} {ideal:>8.2f} {eps / ideal:>6.2f} {cpu_share:>10.0%} {cpu_ms:>10.2f} "
                f"{policy_ms:>10.1f} {env_ms:>9.1f}"
            )
        store.close()


if __name__ == "__main__":
    main()
