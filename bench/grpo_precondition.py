"""Done-when experiment (issue 11): GRPO on envs/examples/precondition_verification.py in the
sandbox, over several training seeds; held-out synthetic reward before -> after; the kept
adapter reloaded with PEFT and re-evaluated to the same held-out score.

    .venv/bin/python -m bench.grpo_precondition --model DIR [--backend docker] [--seeds 0 1 2] [--steps 6]

Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec, open_factory
from gapforge.training.service import TrainJob, train_capability

ROOT = Path(__file__).resolve().parents[1]

MODULE = ROOT / "envs" / "examples" / "precondition_verification.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="docker")
    ap.add_argument(
        "--module", default=str(MODULE), help="the env module trained on (default: the example precondition env)"
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default="/tmp/gapforge-grpo-precondition")
    ap.add_argument("--k", type=int, default=4, help="rollouts per group")
    ap.add_argument("--turns", type=int, default=6, help="assistant turns per rollout")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--heldout", type=int, default=4, help="held-out seeds (x2 rollouts each)")
    ap.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature of rollouts and held-out evaluation"
    )
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: the tiny profile's)")
    ap.add_argument("--eval-every", type=int, default=3, help="held-out evaluation every N steps")
    ap.add_argument(
        "--test",
        type=int,
        default=0,
        help="test seeds, disjoint from training AND held-out seeds (which chose the kept adapter): base vs adapter on them",
    )
    args = ap.parse_args()
    spec = EnvSpec(kind="sandbox", module=str(Path(args.module).resolve()), sandbox={"backend": args.backend})
    rows = []
    for seed in args.seeds:
        extra = {"learning_rate": args.lr} if args.lr is not None else {}
        cfg = TrainingConfig.tiny(
            seed=seed,
            max_steps=args.steps,
            eval_every=args.eval_every,
            save_every=args.eval_every,
            **extra,
            num_generations=args.k,
            groups_per_step=2,
            max_turns=args.turns,
            max_new_tokens=args.max_new_tokens,
            train_seeds=48,
            heldout_seeds=args.heldout,
            heldout_samples=2,
            patience=10,
            temperature=args.temperature,
        )
        job = TrainJob(
            name=f"precondition-seed{seed}",
            capability="precondition_verification",
            base_model=args.model,
            env=spec,
            config=cfg,
            out_dir=f"{args.out}/seed{seed}",
        )
        t0 = time.perf_counter()
        r = train_capability(job, progress=lambda row: print(json.dumps(row), flush=True))
        reload, test = None, (None, None)
        if r.adapter_path:
            from gapforge.training.evaluate import load_policy
            from gapforge.training.selection import evaluate_heldout

            model, tok = load_policy(args.model, r.adapter_path)
            make_env, close = open_factory(spec, pool_size=2)
            try:
                reload = evaluate_heldout(model, tok, make_env, cfg.heldout_seed_list(), cfg, eval_seed=cfg.seed)[
                    "reward"
                ]
                if args.test:
                    # the held-out seeds chose the kept checkpoint, so its held-out score is a best-of-N; unseen seeds are not
                    first = cfg.train_seeds + cfg.heldout_seeds
                    seeds = list(range(first, first + args.test))
                    base, base_tok = load_policy(args.model)
                    test = (
                        evaluate_heldout(base, base_tok, make_env, seeds, cfg, eval_seed=cfg.seed)["reward"],
                        evaluate_heldout(model, tok, make_env, seeds, cfg, eval_seed=cfg.seed)["reward"],
                    )
            finally:
                close()
        moved = _lora_b_norm(r.adapter_path) if r.adapter_path else None
        rows.append(
            (
                seed,
                r.heldout_before,
                r.heldout_after,
                r.best_step,
                r.steps,
                reload,
                moved,
                *test,
                time.perf_counter() - t0,
            )
        )
        print(
            f"seed {seed}: held-out {r.heldout_before:.4f} -> {r.heldout_after:.4f} (best step {r.best_step}/{r.steps}); "
            f"reloaded adapter re-evaluated: {reload}; |LoRA B| {moved}; test seeds base -> adapter: {test}",
            flush=True,
        )
    print("seed  before  after  best_step  steps  reloaded  lora_b_norm  test_base  test_adapter  wall_s")
    for row in rows:
        print("  ".join(str(x if not isinstance(x, float) else round(x, 4)) for x in row))


def _lora_b_norm(adapter_dir: str) -> float:
    """L2 norm of the saved LoRA B matrices: PEFT initialises them to zero, so > 0 means the adapter moved."""
    from safetensors.torch import load_file

    weights = load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))
    return round(float(sum(float((w.float() ** 2).sum()) for k, w in weights.items() if "lora_B" in k) ** 0.5), 6)


if __name__ == "__main__":
    main()
