"""Batched decoding (serving.batching) on multi-turn contexts: what the two cache changes buy.

Rows play several turns, as rollouts do: each turn's context is the last one, the sampled tokens and
a fixed "env reply". Three decoders on the same rows and seeds, in one run:
  copy     - the cache re-copied at every decode step (torch.cat, transformers' DynamicLayer) and every
             turn prefilled from scratch (what serving.batching did before);
  reserved - room reserved in the cache, each step written in place; every turn still prefilled whole;
  kept     - reserved, plus each finished row's cache kept: the next turn prefills only its new tokens.
Prints seconds, tokens/s and the ratio to `copy` per batch size, the share of prompt tokens reused,
and whether every row's tokens equal `copy`'s.

    python -m bench.decode [--model gapforge/demo_data/shop-policy] [--rows 1,8,16,32] [--turns 4] [--prompt 400] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gapforge.serving.batching as batching
from gapforge.demo_data import SHOP_POLICY_DIR


def play(
    model, rows: int, turns: int, prompt: int, new_tokens: int, reply: list[int], prefix_bytes: int
) -> tuple[float, list, list[int]]:
    gen = batching.BatchGenerator(
        model, eos_ids={-1}, prefix_bytes=prefix_bytes
    )  # no eos: every row decodes new_tokens
    vocab = model.config.vocab_size - 10
    contexts = [[(17 * i + 7 * j) % vocab + 5 for j in range(prompt + 11 * i)] for i in range(rows)]
    outs = []
    t0 = time.perf_counter()
    for turn in range(turns):
        decoded = gen.run_batch(
            contexts, seeds=[1000 * turn + i for i in range(rows)], temperature=0.7, max_new_tokens=new_tokens
        )
        outs.append([d.ids for d in decoded])
        contexts = [c + d.ids + reply for c, d in zip(contexts, decoded)]
    return time.perf_counter() - t0, outs, gen.prefill_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=SHOP_POLICY_DIR)
    ap.add_argument("--rows", default="1,8,16,32")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=400, help="first-turn context length (tokens)")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(args.model), local_files_only=True).eval()
    reply = [(5 * j) % (model.config.vocab_size - 10) + 5 for j in range(60)]
    reserve = batching._reserve
    play(model, 2, 1, 64, 4, reply, 0)  # warm-up
    print(
        f"{args.model.name}: {args.turns} turns, first context {args.prompt} tokens, {args.new_tokens} new tokens per turn, "
        f"{args.threads} thread(s)"
    )
    for rows in [int(r) for r in args.rows.split(",")]:
        batching._reserve = lambda cache, room: None  # baseline: transformers' own layer, torch.cat per step
        copy_s, copy_out, _ = play(model, rows, args.turns, args.prompt, args.new_tokens, reply, 0)
        batching._reserve = reserve
        res_s, res_out, _ = play(model, rows, args.turns, args.prompt, args.new_tokens, reply, 0)
        kept_s, kept_out, (prefilled, reused) = play(
            model, rows, args.turns, args.prompt, args.new_tokens, reply, 256 * 2**20
        )
        tokens = rows * args.turns * args.new_tokens
        print(
            f"rows {rows:>3}: copy {copy_s:6.2f} s ({tokens / copy_s:5.0f} tok/s) | reserved {res_s:6.2f} s x{copy_s / res_s:.2f} "
            f"| kept {kept_s:6.2f} s x{copy_s / kept_s:.2f} (prompt tokens reused {reused / (prefilled + reused):.0%}) "
            f"| same tokens: reserved {res_out == copy_out}, kept {kept_out == copy_out}"
        )


if __name__ == "__main__":
    main()
