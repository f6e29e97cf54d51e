"""The training rollout budget every comparison is held to (issue 49: GRPO on the target and GEPA at TRACE's budget).

TRACE trains one LoRA adapter per capability, each for `training.max_steps` steps of `training.rollouts_per_step`
rollouts. A baseline that spends the same number of training rollouts gets `training_rollout_budget(cfg, n_adapters)`
of them, whatever it does with each: GRPO on the target's own tasks (`baseline_steps`), or GEPA's metric calls. The
budget follows the number of adapters trained, so a second capability doubles it.
"""

from __future__ import annotations

import math
from typing import Any

from gapforge.training.config import TrainingConfig


def training_rollout_budget(cfg: Any, n_adapters: int) -> int:
    """Training rollouts of `n_adapters` capability adapters together, each at its configured steps (early stopping
    may spend fewer; this is the budget, not the spend)."""
    if n_adapters < 0:
        raise ValueError(f"n_adapters must be >= 0, got {n_adapters}")
    return n_adapters * cfg.training.max_steps * cfg.training.rollouts_per_step


def baseline_steps(cfg: Any, n_adapters: int, *, scale: float = 1.0) -> int:
    """GRPO steps of a single adapter trained with the same settings that spend `scale` x the adapters' budget (steps
    of `rollouts_per_step` rollouts; 0 when no adapter was trained)."""
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    budget = training_rollout_budget(cfg, n_adapters) * scale
    return int(round(budget / cfg.training.rollouts_per_step))


def baseline_tasks(analysis_tasks: list[str], most: int) -> tuple[list[str], list[str]]:
    """(training tasks, selection tasks) of GRPO on the target: the analysis split's tasks in sorted order (ids group
    by family, and by shop instance), every k-th held back for the baseline's own checkpoint selection (never the
    evaluation's held-out tasks): k = 4, a quarter, at most `most` tasks (training.heldout_seeds: an adapter selects
    on as many), so the selection covers every family of a large split. (Every (n // 4)-th held back ~4 tasks
    whatever n: of 220 analysis tasks, 4 hard ones the base never solved, a constant selection reward, step 0
    kept; docs/experiments/power.md.)"""
    tasks = sorted(analysis_tasks)
    held = tasks[:: max(4, math.ceil(len(tasks) / max(1, most)))]
    return [t for t in tasks if t not in held], held


def baseline_settings(
    cfg: Any, n_held: int, n_adapters: int, *, scale: float = 1.0, learning_rate: float | None = None
) -> TrainingConfig:
    """GRPO on the target's training settings: the adapters' own, for `scale` x their budget (`baseline_steps`), and a
    checkpoint selection like an adapter's: on as many episodes (heldout_seeds x heldout_samples spread over the
    `n_held` held-back tasks: with 2 samples on 5 tasks it saw 10 and kept step 0 where step 8 was +0.2, run
    r-20261127-77c8b6), at the same fractions of its budget (eval_every stretched with max_steps, so two adapters'
    budget is evaluated at as many points as one adapter's: each evaluation of the demo's baseline plays ~65 shop
    episodes, ~20 s). `learning_rate`: another than the adapters' (bench/baseline_lr.py)."""
    per_adapter = cfg.training.heldout_seeds * cfg.training.heldout_samples
    steps = baseline_steps(cfg, n_adapters, scale=scale)
    stretch = steps / max(1, cfg.training.max_steps)
    update: dict[str, Any] = {
        "max_steps": steps,
        "eval_every": max(1, round(cfg.training.eval_every * stretch)),
        "heldout_samples": max(cfg.training.heldout_samples, math.ceil(per_adapter / max(1, n_held))),
    }
    if learning_rate is not None:
        update["learning_rate"] = learning_rate
    return cfg.training.model_copy(update=update)
