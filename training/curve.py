"""The adapters a rollout-scaling curve evaluates (the paper's Fig. 4): the LoRA adapter at step round(f * max_steps)
for each f of `TrainingConfig.curve_fractions` (0, 1/4, 1/2, 3/4, 1 by default), kept under
`<out>/curve/step-NNNNNN/`.

TRL's resume checkpoints (`trl/checkpoint-N`, with optimizer state) are rotated by `save_total_limit` and the held-out
selection keeps only its chosen adapter (`evals/`); these are neither: they are written whole or not at all
(`store.files.complete_dir`), never pruned, and cost one small adapter each. Step 0 is the fresh LoRA adapter (its B
matrices are zero: the base policy exactly). A job stopped early (`early_stopping`) has no adapter for the steps it
never reached: a curve turns early stopping off. Saving reads the weights only, so the training itself is unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from gapforge.store.files import check_dir, complete_dir
from gapforge.training.config import TrainingConfig

CURVE_DIR = "curve"


def curve_adapters(out: str | Path) -> dict[int, Path]:
    """{step: adapter dir} of the whole curve adapters a job left (a cut one is not listed)."""
    found = {}
    for d in sorted(Path(out, CURVE_DIR).glob("step-*")):
        if check_dir(d, required=("adapter_config.json",)) is None:
            found[int(d.name.split("-")[1])] = d
    return found


def drop_after(out: str | Path, step: int) -> None:
    """A job resumed from the checkpoint at `step` trains the later steps again: their curve adapters go."""
    for d in Path(out, CURVE_DIR).glob("step-*"):
        if int(d.name.split("-")[1]) > step:
            shutil.rmtree(d, ignore_errors=True)


def save_curve_adapter(out: str | Path, step: int, model: Any, cfg: TrainingConfig) -> Path:
    """Write the adapter at `step` (and its fraction of max_steps) whole, unless it is there already."""
    target = Path(out, CURVE_DIR, f"step-{step:06d}")
    if check_dir(target, required=("adapter_config.json",)) is None:
        return target
    with complete_dir(target, "a scaling-curve adapter") as tmp:
        model.save_pretrained(str(tmp))
        (Path(tmp) / "curve.json").write_text(
            json.dumps(
                {
                    "step": step,
                    "max_steps": cfg.max_steps,
                    "fraction": step / cfg.max_steps,
                    "training_rollouts": step * cfg.rollouts_per_step,
                }
            )
        )
    return target


def curve_callback(out: str | Path, cfg: TrainingConfig):
    """A TrainerCallback that keeps the adapter at every `cfg.curve_steps()` step it reaches (step 0: see
    `save_curve_adapter` before `trainer.train`)."""
    from transformers import TrainerCallback

    steps = set(cfg.curve_steps())

    class _Curve(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> Any:
            if state.global_step in steps and model is not None:
                save_curve_adapter(out, state.global_step, model, cfg)
            return control

    return _Curve()
