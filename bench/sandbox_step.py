"""Benchmark: per-step round trip of a warm SandboxedEnv vs the same env in-process,
warm pool acquire, and cold container start.

    .venv/bin/python -m bench.sandbox_step [--module PATH] [--steps N] [--backend docker|process]

Targets (issue 4): median step round trip <= 2 ms, warm acquire <= 50 ms.
Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.pool import SandboxPool

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_MODULE = ROOT / "envs" / "examples" / "precondition_verification.py"


def _message(i: int, action: dict[str, Any]) -> Message:
    if "tool" in action:
        return Message.assistant(
            tool_calls=[ToolCall(id=f"c{i}", name=action["tool"], arguments=action.get("arguments", {}))]
        )
    return Message.assistant(str(action.get("say", "")))


def step_times(env: Any, solutions: dict[int, list[dict[str, Any]]], n_steps: int) -> list[float]:
    """Replay reference solutions over seeds; time every step() round trip."""
    times: list[float] = []
    seed = 0
    while len(times) < n_steps:
        s = seed % len(solutions)
        env.reset(s)
        for i, action in enumerate(solutions[s]):
            msg = _message(i, action)
            t0 = time.perf_counter()
            done = env.step(msg).done
            times.append(time.perf_counter() - t0)
            if done:
                break
        env.score()
        seed += 1
    return times


def summary(name: str, xs: list[float]) -> float:
    xs = sorted(xs)
    med = statistics.median(xs)
    p90 = xs[int(0.9 * (len(xs) - 1))]
    print(f"{name:<38} n={len(xs):<5} median {med * 1e3:8.3f} ms   p90 {p90 * 1e3:8.3f} ms")
    return med


def timed(fn: Callable[[], Any], n: int, between: Callable[[Any], None]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        obj = fn()
        out.append(time.perf_counter() - t0)
        between(obj)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", type=Path, default=DEFAULT_MODULE)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--backend", choices=["docker", "process"], default="docker")
    args = ap.parse_args()
    cfg = SandboxConfig(backend=args.backend, pool_size=2)
    print(
        f"module {args.module.relative_to(ROOT) if args.module.is_relative_to(ROOT) else args.module}, backend {args.backend}"
    )

    local = InProcessSyntheticEnv(args.module)
    solutions = {s: local.env_class().solution(s) for s in range(20)}
    with SandboxPool(cfg) as pool:
        pool.wait_warm(60)
        with SandboxedEnv(args.module, cfg, pool) as env:
            step_times(env, solutions, 200)  # warm-up
            sandboxed = step_times(env, solutions, args.steps)
        in_process = step_times(local, solutions, args.steps)
        print("-- step round trip")
        med_sb = summary("sandboxed step", sandboxed)
        med_ip = summary("in-process step", in_process)
        print(
            f"{'steps/s':<38} sandboxed {len(sandboxed) / sum(sandboxed):9.0f}   in-process {len(in_process) / sum(in_process):9.0f}"
        )
        print(
            f"{'ratio sandboxed / in-process (median)':<38} {med_sb / med_ip:.1f}x   (overhead {1e3 * (med_sb - med_ip):.3f} ms)"
        )

        print("-- acquire")

        def fresh(ch_info: Any) -> None:
            pool.discard(ch_info[0])
            pool.wait_warm(60)

        summary("warm acquire (pre-started, load)", timed(lambda: pool.acquire(args.module), 10, fresh))
        summary(
            "warm acquire (idle, same module)",
            timed(lambda: SandboxedEnv(args.module, cfg, pool), 10, lambda e: e.close()),
        )
    summary("cold start (create+start+load)", timed(lambda: SandboxedEnv(args.module, cfg), 5, lambda e: e.close()))
    print("targets: median step <= 2 ms, warm acquire <= 50 ms")


if __name__ == "__main__":
    main()
