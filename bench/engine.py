"""The batched CPU engine, profiled: the shipped policy playing the shop's tasks at several concurrency levels.

For each level the real collector (agents.rollouts.collect) plays shop episodes with serving.local.LocalPolicy at the
demo's sampling (temperature 0.7, 10 turns, 96 new tokens a turn) and this prints one line:

    concurrency=N episodes/s=... gen_tok/s=... prefill_tok/s=... mean_rows/step=... split: prefill=..% decode=..%
    sample+py=..% idle=..% | env_s=... ratio=...x

- gen_tok/s: tokens sampled per second of wall time; prefill_tok/s: prompt tokens run through the model (a kept
  prefix is not counted: it is reused, not prefilled);
- mean_rows/step: the rows of the average decode forward (the batch the engine really ran);
- split: the generator thread's wall time in prefill forwards, decode forwards, everything else inside a batch
  (sampling, stop checks, cache joins and row drops: "sample+py") and outside any batch (waiting for requests:
  the event loop, chat-template rendering, tokenizing, parsing, the env: "idle");
- env_s: the env's own time summed over episodes (EpisodeRecord.timings);
- ratio: gen_tok/s over the one-sequence speed reference of this run (demo_policy.artifact.speed_reference:
  greedy, one sequence, one thread: what the demo prints as its speed reference).

Before the levels, a roofline: one decode forward of B rows over a cache of `--context` tokens, timed alone, for
each level's B; B / step time is the most tokens/s a full batch of B can give here. The levels' ratios are read
against it.

    python -m bench.engine [--levels 1,8,32,64] [--episodes 88] [--threads N]

Reads the engine's internals by wrapping them (BatchGenerator._prefill / _decode, _Running.forward): nothing of the
engine changes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.shop import ShopEnv
from gapforge.serving import batching
from gapforge.serving.local import LocalPolicy
from gapforge.training.evaluate import MemorySink

_FORWARD = batching._Running.forward
DEMO = {"temperature": 0.7, "max_turns": 10, "max_new_tokens": 96}  # gapforge/demo_profile.yaml


@dataclass
class Profile:
    """What the generator thread did, filled by the wrappers below."""

    prefill_s: float = 0.0
    decode_forward_s: float = 0.0
    batch_s: float = 0.0  # inside _decode: prefill + decode forwards + sampling and Python
    generated: int = 0
    rows_per_step: list[int] = field(default_factory=list)
    prefilled: int = 0  # prompt tokens run through the model (BatchGenerator.prefill_tokens[0])


def instrument(policy: LocalPolicy, prof: Profile) -> None:
    """Time the policy's generator: its prefills, its decode forwards (a forward hook) and its whole batches."""
    gen = policy._generation.batcher
    prefill, decode, forward = gen._prefill, gen._decode, _FORWARD

    def timed_prefill(r: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return prefill(r)
        finally:
            prof.prefill_s += time.perf_counter() - t0

    def timed_decode(batch: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return decode(batch, **kw)
        finally:
            prof.batch_s += time.perf_counter() - t0

    def timed_forward(running: Any, tokens: Any) -> None:
        t0 = time.perf_counter()
        try:
            return forward(running, tokens)
        finally:
            prof.decode_forward_s += time.perf_counter() - t0
            prof.rows_per_step.append(int(tokens.shape[0]))

    gen._prefill, gen._decode = timed_prefill, timed_decode  # type: ignore[method-assign]
    batching._Running.forward = timed_forward  # type: ignore[method-assign]  # restored by level()


def roofline(model_dir: Path, rows: list[int], context: int, steps: int = 20) -> dict[int, tuple[float, float]]:
    """Seconds of one decode forward of B rows over a `context`-token cache, the median of `steps`: through the
    model's own forward (transformers) and through the engine's (serving.fast_forward), in that order."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from gapforge.serving.fast_forward import FastForward

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).eval()
    fast = FastForward.of(model)
    assert fast is not None, "the engine's forward does not take this model"
    fast.bind()
    vocab = model.config.vocab_size - 10
    out = {}
    with torch.no_grad():
        for b in rows:
            ids = torch.tensor([[(7 * j + 3 * i) % vocab + 5 for j in range(context)] for i in range(b)])
            token = torch.full((b, 1), 11)
            medians = []
            for engine in ("transformers", "fast"):
                cache = DynamicCache()
                model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                batching._reserve(cache, steps + 2)
                times = []
                for s in range(steps):
                    position = torch.full((b, 1), context + s)
                    t0 = time.perf_counter()
                    if engine == "fast":
                        fast.decode(token, position, cache.layers, None)
                    else:
                        model(
                            input_ids=token,
                            position_ids=position,
                            past_key_values=cache,
                            use_cache=True,
                            logits_to_keep=1,
                        )
                    times.append(time.perf_counter() - t0)
                medians.append(statistics.median(times))
            out[b] = (medians[0], medians[1])
    return out


async def level(
    model_dir: Path, tasks: list[str], concurrency: int, episodes: int, forward: str
) -> tuple[float, Profile, MemorySink]:
    policy = LocalPolicy(model_dir, temperature=DEMO["temperature"], max_new_tokens=DEMO["max_new_tokens"], seed=0)
    policy._generation.batcher.fast = forward == "fast"
    prof = Profile()
    instrument(policy, prof)
    samples = max(1, -(-episodes // len(tasks)))
    plan = CollectPlan("bench", "shop", tasks, samples, concurrency, DEMO["max_turns"], DEMO["temperature"])
    sink = MemorySink()
    t0 = time.perf_counter()
    await collect(plan, make_env=ShopEnv, policy=policy, sink=sink)
    wall = time.perf_counter() - t0
    prof.prefilled = policy._generation.batcher.prefill_tokens[0]
    prof.generated = sum(policy._generation.batcher.step_rows)  # every decode step samples one token per row
    await policy.aclose()
    batching._Running.forward = _FORWARD  # type: ignore[method-assign]
    return wall, prof, sink


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=SHOP_POLICY_DIR)
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument(
        "--episodes", type=int, default=88, help="episodes per level (at least the level; 88 = the shop's 44 tasks x 2)"
    )
    ap.add_argument("--one-episodes", type=int, default=44, help="episodes at concurrency 1 (the slowest level)")
    ap.add_argument(
        "--context", type=int, default=700, help="cache length of the roofline's decode step (a shop turn's context)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument(
        "--forward",
        default="fast,transformers",
        help="the engine's forward(s) to play each level with: fast (serving.fast_forward, shipped), transformers (model(...))",
    )
    args = ap.parse_args()

    import torch

    from gapforge.demo_policy.artifact import speed_reference

    if args.threads:
        torch.set_num_threads(args.threads)
    levels = [int(x) for x in args.levels.split(",")]
    ref = speed_reference(args.model)["tokens_per_s"]
    print(
        f"model {args.model.name}  torch threads {torch.get_num_threads()}  speed reference {ref:.0f} tokens/s (greedy, one sequence, 1 thread)"
    )
    # on a thread of its own that ends before the levels: a thread that ran a parallel op keeps its OpenMP team, and
    # with two teams in a process libgomp stops spinning between regions once they outnumber the cores (the levels
    # then ran 1.5x slower; docs/experiments/engine.md, section 8)
    lines: dict[int, tuple[float, float]] = {}
    failed: list[BaseException] = []

    def probe() -> None:
        try:
            lines.update(roofline(args.model, levels, args.context))
        except BaseException as e:  # noqa: BLE001 - raised again on the main thread
            failed.append(e)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    for b, (slow_s, step_s) in lines.items():
        print(
            f"roofline rows={b:<3d} one decode step over {args.context} cached tokens: {step_s * 1e3:6.2f} ms -> at most "
            f"{b / step_s:7.0f} tokens/s ({b / step_s / ref:5.1f}x the reference); through model(...): {slow_s * 1e3:6.2f} ms "
            f"({slow_s / step_s:4.2f}x the step)"
        )
    tasks = ShopEnv().task_ids()
    for n, forward in [(n, f) for n in levels for f in args.forward.split(",")]:
        episodes = max(n, args.one_episodes if n == 1 else args.episodes)
        wall, prof, sink = asyncio.run(level(args.model, tasks, n, episodes, forward))
        rows = list(sink.rows.values())
        env_s = sum(r["timings"].get("env_s", 0.0) for r in rows)
        inside = prof.batch_s - prof.prefill_s - prof.decode_forward_s
        idle = max(0.0, wall - prof.batch_s)
        share = {
            k: v / wall
            for k, v in (
                ("prefill", prof.prefill_s),
                ("decode", prof.decode_forward_s),
                ("sample+py", inside),
                ("idle", idle),
            )
        }
        gen_rate = prof.generated / wall
        mean_rows = statistics.mean(prof.rows_per_step) if prof.rows_per_step else 0.0
        print(
            f"concurrency={n:<3d} forward={forward:<12s} episodes={len(rows):<4d} episodes/s={len(rows) / wall:6.2f} gen_tok/s={gen_rate:7.0f} "
            f"prefill_tok/s={prof.prefilled / wall:7.0f} mean_rows/step={mean_rows:5.1f} split: "
            + " ".join(f"{k}={v:4.0%}" for k, v in share.items())
            + f" | env_s={env_s:6.1f} wall_s={wall:6.1f} ratio={gen_rate / ref:5.1f}x"
        )


if __name__ == "__main__":
    main()
