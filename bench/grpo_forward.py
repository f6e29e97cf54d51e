"""The GRPO loss's forward + backward on a step of multi-turn rollouts: TRL's one padded batch vs one rollout at a time.

A step's rows are built at the lengths of a real demo step (prompt + completion tokens per rollout, measured on
the precondition env, 2026-11-25) or `--lengths`, with a ~215-token prompt; the token values do not change
the cost. Both ways run through the same GRPOTrainer code path (training.grpo's rows trainer, and TRL's own
method on the same trainer object) with a non-zero LoRA adapter on the shipped policy. Prints seconds for the
forward and the backward, the ratio to the padded batch, the step's padding share, and the largest difference
in logprobs and in the adapter's gradient between the two.

    python -m bench.grpo_forward [--model gapforge/demo_data/shop-policy] [--threads 1] [--repeats 2] [--lengths 546,...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gapforge.demo_data import SHOP_POLICY_DIR

# prompt + completion tokens of the 16 rollouts of four consecutive steps of the demo's precondition adapter
STEPS = [
    [546, 547, 547, 550, 550, 550, 570, 570, 570, 571, 571, 571, 574, 574, 810, 815],
    [582, 689, 1059, 1162, 1166, 1166, 1218, 1219, 1236, 1239, 1239, 1239, 1239, 1256, 1327, 1330],
    [543, 543, 546, 546, 546, 729, 1039, 1124, 1154, 1238, 1386, 1441, 1713, 1714, 1717, 1720],
    [559, 559, 559, 559, 560, 563, 563, 1190, 1300, 1303, 1721, 1723, 1724, 1726, 1727, 1730],
]
PROMPT = 215


def batch(lengths: list[int], vocab: int, pad: int, gen):  # -> (ids, mask, completion width)
    import torch

    width = max(lengths) - PROMPT
    ids = torch.randint(5, vocab - 5, (len(lengths), PROMPT + width), generator=gen)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1  # prompts of equal length here; completions right-padded
    return ids.masked_fill(mask == 0, pad), mask, width


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=SHOP_POLICY_DIR)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a demo training job gets 1 of 2 cores)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--lengths", default=None, help="comma-separated rollout lengths of one step (default: four demo steps)"
    )
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from gapforge.training.config import TrainingConfig
    from gapforge.training.grpo import RolloutRecorder, build_trainer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(args.model), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.float32, local_files_only=True)
    cfg = TrainingConfig.tiny(num_generations=8, temperature=0.7, loss_forward="rows", max_completion_length=1536)
    trainer = build_trainer(model, tok, lambda: None, [0], cfg, tempfile.mkdtemp(), RolloutRecorder())
    gen = torch.Generator().manual_seed(0)
    for name, p in trainer.model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.02, generator=gen)
    ways = {
        "padded batch (TRL)": GRPOTrainer._get_per_token_logps_and_entropies,
        "one rollout at a time": type(trainer)._get_per_token_logps_and_entropies,
    }
    steps = [[int(n) for n in args.lengths.split(",")]] if args.lengths else STEPS
    print(
        f"{args.model.name}: {len(steps)} step(s) of {len(steps[0])} rollouts, {args.threads} thread(s), best of {args.repeats}"
    )
    totals = {w: [0.0, 0.0] for w in ways}
    for lengths in steps:
        ids, mask, width = batch(lengths, model.config.vocab_size, tok.pad_token_id, gen)
        loss_mask = mask[:, -width:].float()
        padding = 1 - mask.sum().item() / mask.numel()
        results = {}
        for way, fn in ways.items():
            best = (float("inf"), float("inf"))
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                logps, _entropies, _ = fn(trainer, trainer.model, ids, mask, width, compute_entropy=True)
                loss = -(logps * loss_mask).sum() / loss_mask.sum()
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
                trainer.model.zero_grad()
                best = min(best, (t1 - t0, t2 - t1), key=sum)
            results[way] = (best, (logps * loss_mask).detach(), grad)
            totals[way][0] += best[0]
            totals[way][1] += best[1]
        (base, base_lp, base_g), (rows, rows_lp, rows_g) = results.values()
        print(
            f"  longest {max(lengths)}, padding {padding:.0%}: padded {base[0]:.2f} + {base[1]:.2f} s, "
            f"rows {rows[0]:.2f} + {rows[1]:.2f} s (forward + backward): {sum(base) / sum(rows):.2f}x; "
            f"max |logprob diff| {(base_lp - rows_lp).abs().max().item():.1e}, "
            f"grad rel diff {((base_g - rows_g).norm() / base_g.norm()).item():.1e}"
        )
    base, rows = totals.values()
    print(f"all steps: padded {sum(base):.2f} s, rows {sum(rows):.2f} s: {sum(base) / sum(rows):.2f}x")


if __name__ == "__main__":
    main()
