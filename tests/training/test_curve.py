"""Rollout-scaling curve adapters: kept at round(f * max_steps), never pruned, step 0 the base; early stopping can be
turned off so every fraction is reached; the selected adapter is still kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec
from gapforge.training.service import TrainJob, train_capability


def test_curve_steps_are_the_rounded_fractions_once_each() -> None:
    assert TrainingConfig.tiny(max_steps=16).curve_steps() == [0, 4, 8, 12, 16]
    assert TrainingConfig.tiny(max_steps=2).curve_steps() == [0, 1, 2]  # 0.25 * 2 and 0.5 * 2 round to 0 and 1
    with pytest.raises(ValueError, match="curve_fractions"):
        TrainingConfig.tiny(curve_fractions=[0.5, 1.5])


def _job(tmp_path: Path, model_dir: str, **cfg: object) -> TrainJob:
    config = TrainingConfig.tiny(
        **{
            **dict(
                max_steps=4,
                groups_per_step=1,
                num_generations=2,
                max_turns=2,
                max_new_tokens=8,
                max_completion_length=128,
                train_seeds=4,
                heldout_seeds=2,
                heldout_samples=1,
                eval_every=1,
                save_every=2,
                patience=1,
                min_improvement=10.0,
            ),
            **cfg,
        }
    )
    return TrainJob(
        name="toy",
        capability=None,
        base_model=str(model_dir),
        config=config,
        out_dir=str(tmp_path / "toy"),
        env=EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
    )


@pytest.mark.slow
def test_every_fraction_is_kept_with_early_stopping_off(tmp_path, tiny_model_dir) -> None:
    # min_improvement 10 with patience 1: early stopping would end the job at its first evaluation after step 0
    stopped = train_capability(_job(tmp_path / "on", tiny_model_dir))
    assert stopped.stopped_early and stopped.steps == 1
    assert [c["step"] for c in stopped.curve_adapters] == [0, 1]

    result = train_capability(_job(tmp_path / "off", tiny_model_dir, early_stopping=False))
    assert not result.stopped_early and result.steps == 4
    assert [(c["step"], c["training_rollouts"]) for c in result.curve_adapters] == [
        (0, 0),
        (1, 2),
        (2, 4),
        (3, 6),
        (4, 8),
    ]
    assert result.adapter_path and Path(result.adapter_path).is_dir()  # the selected adapter is kept beside them
    assert len(list(Path(result.adapter_path).parent.glob("step-*"))) == 1  # the selection still prunes its own
    first, last = (
        load_file(str(Path(c["path"]) / "adapter_model.safetensors"))
        for c in (result.curve_adapters[0], result.curve_adapters[-1])
    )
    assert all(
        torch.count_nonzero(v) == 0 for k, v in first.items() if "lora_B" in k
    )  # step 0: the base policy exactly
    assert any(not torch.equal(first[k], last[k]) for k in first if "lora_B" in k)  # trained weights moved
    assert json.loads((Path(result.curve_adapters[2]["path"]) / "curve.json").read_text())["fraction"] == 0.5
