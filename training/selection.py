"""Held-out selection and early stopping (never chosen by the target benchmark).

`evaluate_heldout` plays the held-out synthetic seeds (disjoint from the training seeds) with the current policy at
the training temperature and returns the mean reward. `HeldoutSelector` (a transformers TrainerCallback) evaluates
every `eval_every` steps, saves that step's adapter under `evals/step-NNNNNN/`, keeps the curve in `selection.json`
(rewritten after each evaluation, so a killed job resumes with it; entries after the resumed checkpoint are dropped)
and stops training after `patience` evaluations without an improvement of `min_improvement` (unless `early_stopping`
is off: a rollout-scaling curve trains every run to max_steps).

Selection rule (`beats_step0`): every evaluation plays the same held-out rollouts (same seeds, same sampling seed), so
checkpoint s and step 0 are paired rollout by rollout. A checkpoint replaces step 0 only when the one-sided 95% lower
bound of the paired mean difference is above 0: mean(d) - 1.645 * sd(d) / sqrt(n) > 0, with d the per-rollout reward
differences (n >= 2). Among the checkpoints that pass, the highest mean reward wins (the earliest on ties); when none
passes, step 0 (the untrained adapter, i.e. the base policy) is kept. A held-out "after" is still the best of several
evaluations: claims of a gain are made on episodes nobody selected on.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from gapforge.store.files import complete_dir
from gapforge.training.config import TrainingConfig
from gapforge.training.rollout import EnvFactory, run_groups, settings
from gapforge.training.sampler import TransformersSampler


def evaluate_heldout(
    model: Any, tokenizer: Any, make_env: EnvFactory, seeds: list[Any], cfg: TrainingConfig, *, eval_seed: int = 0
) -> dict[str, Any]:
    """Mean reward over `seeds` x `cfg.heldout_samples` rollouts (fixed sampling seed: same model, same score)."""
    sampler = TransformersSampler(model, tokenizer, seed=10_000 + eval_seed)
    rewards: list[float] = []  # in (seed, sample) order: paired across evaluations
    failures = 0
    tasks = [(seed, cfg.heldout_samples) for seed in seeds]
    groups = run_groups(make_env, tasks, sampler=sampler, tokenizer=tokenizer, **settings(cfg))
    for group in groups:  # every seed's rollouts sampled together, each row from its own keyed seed
        rewards += [r.reward for r in group]
        failures += sum(1 for r in group if r.dropped is not None)
    return {
        "reward": sum(rewards) / max(1, len(rewards)),
        "rollouts": len(rewards),
        "env_failures": failures,
        "success": None,
        "rewards": [round(r, 6) for r in rewards],
    }


Z_ONE_SIDED_95 = 1.645


def paired_margin(after: list[float], before: list[float]) -> dict[str, float] | None:
    """Mean paired difference after - before and its one-sided 95% lower bound; None when the two evaluations are not
    paired (different lengths) or have fewer than 2 rollouts."""
    if len(after) != len(before) or len(after) < 2:
        return None
    d = [a - b for a, b in zip(after, before)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return {"diff": round(mean, 6), "low": round(mean - Z_ONE_SIDED_95 * sd / math.sqrt(n), 6), "n": n}


def beats_step0(entry: dict[str, Any], step0: dict[str, Any]) -> bool:
    """The selection rule (module docstring): the paired lower bound is above 0."""
    m = paired_margin(entry.get("rewards") or [], step0.get("rewards") or [])
    return m is not None and m["low"] > 0


class HeldoutSelector(TrainerCallback):
    def __init__(
        self,
        out_dir: Path,
        evaluate: Callable[[Any], dict[str, Any]],
        cfg: TrainingConfig,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.out_dir, self.evaluate, self.cfg, self.progress = Path(out_dir), evaluate, cfg, progress
        self.path = self.out_dir / "selection.json"
        self.curve: list[dict[str, Any]] = []
        self.stopped_early = False

    def load(self, resume_step: int) -> None:
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            self.curve = [e for e in data.get("curve", []) if e["step"] <= resume_step]
        for d in (self.out_dir / "evals").glob("step-*"):
            if int(d.name.split("-")[1]) > resume_step:
                shutil.rmtree(d, ignore_errors=True)
        self._save()

    def _save(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        rule = "beats_step0: paired one-sided 95% lower bound > 0"
        tmp.write_text(json.dumps({"curve": self.curve, "best": self.best, "rule": rule}, indent=1))
        tmp.replace(self.path)

    @property
    def best(self) -> dict[str, Any] | None:
        """Step 0 unless a checkpoint beats it by more than the held-out noise (`beats_step0`)."""
        if not self.curve:
            return None
        step0 = self.curve[0]
        passing = [step0] + [e for e in self.curve[1:] if beats_step0(e, step0)]
        return max(passing, key=lambda e: (e["reward"], -e["step"]))

    def adapter_dir(self, step: int) -> Path:
        return self.out_dir / "evals" / f"step-{step:06d}"

    def record(self, step: int, model: Any) -> dict[str, Any]:
        if any(e["step"] == step for e in self.curve):
            return next(e for e in self.curve if e["step"] == step)
        result = self.evaluate(model)
        entry = {"step": step, **result}
        if self.curve:
            entry["vs_step0"] = paired_margin(entry.get("rewards") or [], self.curve[0].get("rewards") or [])
        with complete_dir(self.adapter_dir(step), "a held-out adapter") as tmp:  # whole or absent: never read back cut
            model.save_pretrained(str(tmp))
        self.curve.append(entry)
        self._save()
        if self.progress:
            self.progress({"event": "heldout", **entry})
        return entry

    def plateaued(self) -> bool:
        best_so_far = float("-inf")
        since = 0
        for e in self.curve:
            if e["reward"] > best_so_far + self.cfg.min_improvement:
                best_so_far, since = e["reward"], 0
            else:
                since += 1
        return since >= self.cfg.patience

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> Any:
        if state.global_step % self.cfg.eval_every == 0 or state.global_step >= state.max_steps:
            self.record(state.global_step, model)
            if self.cfg.early_stopping and self.plateaued():
                self.stopped_early = True
                control.should_training_stop = True
        return control

    def prune(self) -> Path | None:
        """Keep only the best evaluated adapter; return its directory."""
        best = self.best
        if best is None:
            return None
        keep = self.adapter_dir(best["step"])
        for d in (self.out_dir / "evals").glob("step-*"):
            if d != keep:
                shutil.rmtree(d, ignore_errors=True)
        return keep
