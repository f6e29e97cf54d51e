"""The teach's SFT pass with activation checkpointing on (TRL's SFTConfig default) and off (demo_policy.teach):
seconds, tokens/s and their ratio on the same rows from the same weights, and whether the trained weights
are equal bit for bit.

    python -m bench.teach_sft [--model gapforge/demo_data/shop-policy] [--rows 64] [--threads 2]

Rows are the teach's own examples (gold shop trajectories of one taught instance and their copy drills,
tokenized with the model's tokenizer). Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gapforge.demo_data import SHOP_POLICY_DIR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=SHOP_POLICY_DIR)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gapforge.demo_policy import teach
    from gapforge.demo_policy.teach_data import build_trajectories, teach_instances

    transformers.utils.logging.disable_progress_bar()  # the weight-loading bars would bury the timings (teach._sft silences TRL's dataset bars)
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    env = teach_instances(1)[0]
    trajs = build_trajectories([(env, t) for t in env.task_ids()], copies=1, refusal_skip=0.75, other_skip=0.1, seed=0)
    rows = teach._rows(tok, trajs, env.tools(), 1, 0)[: args.rows]
    cfg = teach.TeachConfig(batch_size=2)
    tokens = sum(len(r["input_ids"]) for r in rows)
    print(
        f"{args.model.name}: {len(rows)} teach examples ({tokens} tokens), batch 2, 1 epoch, {args.threads} thread(s)"
    )
    results = {}
    for ckpt in (True, False, True, False):  # each twice, interleaved: the machine's load drifts
        model = AutoModelForCausalLM.from_pretrained(args.model)
        with tempfile.TemporaryDirectory() as work:
            t0 = time.perf_counter()
            teach._sft(model, tok, rows, 1.0, 1e-3, cfg, Path(work), lambda _m: None, checkpointing=ckpt)
            s = time.perf_counter() - t0
        results.setdefault(ckpt, []).append((s, {k: v.clone() for k, v in model.state_dict().items()}))
        print(
            f"activation checkpointing {'on ' if ckpt else 'off'}: {s:6.1f} s, {tokens / s:6.0f} tokens/s", flush=True
        )
    on, off = min(s for s, _ in results[True]), min(s for s, _ in results[False])
    same = all(torch.equal(results[True][0][1][k], w) for k, w in results[False][0][1].items())
    print(f"off is x{on / off:.2f} faster than on (best of 2 each); trained weights equal bit for bit: {same}")


if __name__ == "__main__":
    main()
