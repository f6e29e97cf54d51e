"""Rollout collection on the shop: the local executor vs Ray with 1 and 2 rollout workers.

Two policies, each collecting the same plan on every executor (same tasks, samples, concurrency):
- `shop-policy`: the demo's taught tiny model (gapforge/demo_data/shop-policy), CPU-bound: Ray's gain is bounded
  by the cores a machine has (2 here) and by the other jobs sharing them;
- `instant`: a policy that answers at once (a fixed tool call), so an episode costs only the env and
  the collector: the difference between Ray and local per episode is the executor's own overhead
  (dispatch, pickling the EpisodeRecord back, the driver's store write), printed in ms.

Each line: episodes/s and the ratio to the local executor measured in the same run (the machine is shared);
the local rows run before Ray starts in the process (as with executor.kind=local, which never starts Ray).
Every process decodes with one torch thread (Ray gives each 1-CPU worker OMP_NUM_THREADS=1; the driver is set
to match, or the comparison would measure OpenMP threads spinning on a busy machine), and each executor plays
a small warm-up collection before its clock starts (actors up, weights loaded, first forward done).

    python -m bench.ray_scaling [--episodes 48] [--concurrency 8] [--max-turns 4]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from pathlib import Path

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env
from gapforge.executor import ExecutorConfig, episode_player
from gapforge.serving.local import LocalPolicy
from gapforge.store import Store


class InstantPolicy:
    """Looks a customer up on every turn, without thinking: the cheapest possible policy."""

    name = "instant"

    async def respond(self, messages: list[Message], tools: list[dict], *, temperature: float | None = None) -> Message:
        call = ToolCall(
            id=f"call_{len(messages)}", name="find_customer_by_email", arguments={"email": "nobody@example.com"}
        )
        return Message(role="assistant", content=None, tool_calls=[call])


def shop() -> object:
    return make_env("shop")


async def run_once(store: Store, factory, executor: ExecutorConfig | None, plan_args: dict) -> tuple[float, int]:
    plan = CollectPlan(run_id=store.create_run("bench", {}), **plan_args)
    if executor is None:
        policy = factory()
        warm = CollectPlan(
            run_id=store.create_run("bench", {}), **{**plan_args, "tasks": plan_args["tasks"][:4], "samples": 1}
        )
        await collect(warm, make_env=shop, policy=policy, sink=store)
        t0 = time.perf_counter()
        res = await collect(plan, make_env=shop, policy=policy, sink=store)
        elapsed = time.perf_counter() - t0
        close = getattr(policy, "aclose", None)
        if close is not None:
            await close()
        return elapsed, res.ran
    async with episode_player(executor, factory, shop, plan.concurrency) as player:
        warm = CollectPlan(
            run_id=store.create_run("bench", {}), **{**plan_args, "tasks": plan_args["tasks"][:4], "samples": 1}
        )
        await collect(warm, make_env=None, policy=None, sink=store, player=player)  # startup is not per-episode cost
        t0 = time.perf_counter()
        res = await collect(plan, make_env=None, policy=None, sink=store, player=player)
        return time.perf_counter() - t0, res.ran


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=4)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    tasks = make_env("shop").task_ids()
    samples = -(-args.episodes // len(tasks))
    plan_args = dict(
        env="shop",
        tasks=tasks[: -(-args.episodes // samples)],
        samples=samples,
        concurrency=args.concurrency,
        max_turns=args.max_turns,
        temperature=1.0,
    )
    taught = functools.partial(LocalPolicy, SHOP_POLICY_DIR, temperature=1.0, max_new_tokens=64)
    runs = [
        ("shop-policy", taught, args.concurrency),
        ("instant", InstantPolicy, args.concurrency),
        ("instant", InstantPolicy, 1),
    ]  # concurrency 1: one episode at a time, the overhead is latency per episode
    executors = {
        "ray x1": ExecutorConfig(kind="ray", rollout_workers=1),
        "ray x2": ExecutorConfig(kind="ray", rollout_workers=2),
    }
    measured: dict[tuple[int, str], tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        # every local row before Ray starts in this process: after ray.init the driver's own torch decoding ran
        # ~8x slower here (2.7 -> 22.9 s per shop-policy episode), and executor.kind=local never starts Ray
        for i, (_, factory, concurrency) in enumerate(runs):
            measured[i, "local"] = asyncio.run(
                run_once(store, factory, None, {**plan_args, "concurrency": concurrency})
            )
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gapforge-bench")
        for i, (_, factory, concurrency) in enumerate(runs):
            for ename, ecfg in executors.items():
                measured[i, ename] = asyncio.run(
                    run_once(store, factory, ecfg, {**plan_args, "concurrency": concurrency})
                )
        ray.shutdown()
        store.close()
    print(
        f"{'policy':>12} {'in flight':>9} {'executor':>9} {'episodes':>8} {'eps/s':>8} {'vs local':>8} {'ms/episode':>10} {'overhead ms/ep':>14}"
    )
    for i, (pname, _, concurrency) in enumerate(runs):
        local_ms = 1000 * measured[i, "local"][0] / measured[i, "local"][1]
        for ename in ("local", *executors):
            elapsed, ran = measured[i, ename]
            ms = 1000 * elapsed / ran
            over = "" if ename == "local" else f"{ms - local_ms:+.1f}"
            print(
                f"{pname:>12} {concurrency:>9} {ename:>9} {ran:>8} {ran / elapsed:>8.2f} {local_ms / ms:>8.2f} {ms:>10.1f} {over:>14}"
            )


if __name__ == "__main__":
    main()
