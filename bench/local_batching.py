"""Local policy rollouts: batched generation vs one request at a time.

The real collector runs the built-in shop env with a serving.local.LocalPolicy
(the taught tiny policy when `--model` points at it, else a freshly built tiny
random model) at concurrency 1 and at the levels given. Concurrent episodes'
requests are decoded together (serving.batching). Prints episodes/s, policy
turns/s, the mean batch size, the speed-up over concurrency 1, and whether every
episode equals the concurrency-1 one (per-episode seeds, envs.sampling).

    python -m bench.local_batching [--model DIR] [--tasks 22] [--levels 4,8,16] [--temperature 0.7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.envs.shop import ShopEnv
from gapforge.serving.local import LocalPolicy
from gapforge.training.evaluate import MemorySink


def _content(messages: list[dict]) -> list:
    """A conversation without its tool-call ids (random per call, not part of what the model sampled)."""
    return [
        (m.get("role"), m.get("content"), [(c["name"], c["arguments"]) for c in m.get("tool_calls") or []])
        for m in messages
    ]


async def one_level(
    model: Path, tasks: list[str], concurrency: int, args: argparse.Namespace
) -> tuple[float, MemorySink, list[int]]:
    policy = LocalPolicy(model, temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    sink = MemorySink()
    plan = CollectPlan("bench", "shop", tasks, args.samples, concurrency, args.max_turns, args.temperature)
    t0 = time.perf_counter()
    await collect(plan, make_env=ShopEnv, policy=policy, sink=sink)
    wall = time.perf_counter() - t0
    sizes = list(policy._generation.batcher.batch_sizes)
    await policy.aclose()
    return wall, sink, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", type=Path, help="a local model directory (default: a tiny random Qwen3 model built here)"
    )
    ap.add_argument("--tasks", type=int, default=22)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--levels", default="4,8,16")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-turns", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    args = ap.parse_args()
    model = args.model
    if model is None:
        from gapforge.serving.tiny_model import build_tiny_model

        model = build_tiny_model(Path(tempfile.mkdtemp(prefix="gapforge-bench-")) / "tiny")
    tasks = ShopEnv().task_ids()[: args.tasks]
    base_wall, base, _ = asyncio.run(one_level(model, tasks, 1, args))
    turns = sum(r["turns"] for r in base.rows.values())
    n = len(base.rows)
    print(f"model {model}  {n} episodes, {turns} policy turns, T {args.temperature}")
    print(
        f"concurrency  1: {n / base_wall:6.2f} episodes/s  {turns / base_wall:6.1f} turns/s  (baseline, {base_wall:.1f} s)"
    )
    for level in [int(x) for x in args.levels.split(",")]:
        wall, sink, sizes = asyncio.run(one_level(model, tasks, level, args))
        same = sum(_content(sink.rows[k]["messages"]) == _content(base.rows[k]["messages"]) for k in base.rows)
        print(
            f"concurrency {level:2d}: {n / wall:6.2f} episodes/s  {turns / wall:6.1f} turns/s  mean batch {statistics.mean(sizes):4.1f}  "
            f"speed-up {base_wall / wall:4.2f}x  same episodes as at concurrency 1: {same}/{n}"
        )


if __name__ == "__main__":
    main()
