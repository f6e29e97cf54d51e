"""Benchmark: one GRPO step on the tiny model, time split into generation, env (sandbox)
and forward/backward, plus rollouts/s.

    .venv/bin/python -m bench.training_step [--model DIR] [--backend docker|process|trusted] [--steps N]

--model defaults to a freshly built random tiny model (serving/tiny_model.py); pass the
taught policy (`gapforge dev teach`) for realistic turn lengths. Target (issue 11): env
share <= 5% of the step. Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec, open_factory
from gapforge.training.grpo import RolloutRecorder, build_trainer

ROOT = Path(__file__).resolve().parents[1]

MODULE = ROOT / "envs" / "examples" / "precondition_verification.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--backend", default="docker", choices=["docker", "process", "trusted"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from gapforge.training.cpu import set_cpu_threads

    print(f"torch threads: {set_cpu_threads()}")
    tmp = Path(tempfile.mkdtemp(prefix="gapforge-bench-"))
    model_dir = args.model
    if model_dir is None:
        from gapforge.serving.tiny_model import build_tiny_model

        model_dir = str(build_tiny_model(tmp / "tiny"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    spec = (
        EnvSpec(kind="trusted", module=str(MODULE))
        if args.backend == "trusted"
        else EnvSpec(kind="sandbox", module=str(MODULE), sandbox={"backend": args.backend})
    )
    make_env, close = open_factory(spec, pool_size=args.k)
    cfg = TrainingConfig.tiny(
        max_steps=args.steps,
        num_generations=args.k,
        groups_per_step=args.groups,
        max_turns=6,
        max_new_tokens=args.max_new_tokens,
        save_every=1000,
    )
    step_times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.t0)

    rec = RolloutRecorder()
    try:
        trainer = build_trainer(model, tok, make_env, list(range(32)), cfg, str(tmp / "trl"), rec, callbacks=[Timer()])
        trainer.train()
    finally:
        close()
    print(
        f"model {model_dir}  backend {args.backend}  K={args.k} groups={args.groups}  max_new_tokens={args.max_new_tokens}"
    )
    print("step  total_s  generation_s  env_s  fwd_bwd_s  env_share  rollouts/s")
    for i, (total, s) in enumerate(zip(step_times, rec.steps), 1):
        other = s.wall_s - s.gen_s - s.env_s  # tokenizing, parsing, template deltas
        fwd_bwd = total - s.wall_s
        print(
            f"{i:4d}  {total:7.2f}  {s.gen_s:12.2f}  {s.env_s:5.3f}  {fwd_bwd:9.2f}  {s.env_s / total:9.1%}  "
            f"{s.rollouts / total:10.2f}  (rollout bookkeeping {other:.2f}s)"
        )
    tot = sum(step_times)
    env = sum(s.env_s for s in rec.steps)
    gen = sum(s.gen_s for s in rec.steps)
    print(
        f"all   {tot:7.2f}  gen {gen / tot:.1%}  env {env / tot:.1%}  fwd/bwd {(tot - sum(s.wall_s for s in rec.steps)) / tot:.1%}  "
        f"rollouts/s {sum(s.rollouts for s in rec.steps) / tot:.2f}"
    )


if __name__ == "__main__":
    main()
