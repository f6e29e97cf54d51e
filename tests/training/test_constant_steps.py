"""A step whose every group had one reward (zero advantages) skips the loss's forward and backward, and the trained
adapter is the same to the bit as with them (AdamW still steps with the exact zero gradient)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gapforge.envs.protocol import Score
from gapforge.training.config import TrainingConfig
from gapforge.training.grpo import RolloutRecorder, _rows_trainer_class, build_trainer
from tests.training.toy_env import ToyDeskEnv

pytestmark = pytest.mark.slow  # trains a tiny model

CFG = TrainingConfig.tiny(
    max_steps=6,
    groups_per_step=1,
    num_generations=2,
    max_turns=3,
    max_new_tokens=8,
    max_completion_length=256,
    train_seeds=4,
    learning_rate=5e-2,
    loss_forward="rows",
)


class HalfFlatDeskEnv(ToyDeskEnv):
    """Even tickets score 0.5 whatever is said (their groups carry no signal); odd ones as ToyDeskEnv."""

    def score(self) -> Score:
        return Score(reward=0.5, success=False) if self.seed % 2 == 0 else super().score()


def _train(model_dir: str, tmp_path, skip: bool) -> tuple[dict[str, torch.Tensor], int]:
    cls = _rows_trainer_class()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = build_trainer(
        model,
        tokenizer,
        HalfFlatDeskEnv,
        list(range(CFG.train_seeds)),
        CFG,
        str(tmp_path / f"trl-{skip}"),
        RolloutRecorder(),
    )
    assert isinstance(trainer, cls)
    trainer.skip_constant_steps = skip
    torch.manual_seed(0)
    trainer.train()
    return {
        n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad
    }, trainer.skipped_steps


def test_skipping_zero_advantage_steps_trains_the_same_weights(tiny_model_dir, tmp_path) -> None:
    full, none_skipped = _train(tiny_model_dir, tmp_path, skip=False)
    fast, skipped = _train(tiny_model_dir, tmp_path, skip=True)
    assert none_skipped == 0 and 0 < skipped < CFG.max_steps  # flat groups were skipped, informative ones trained
    assert full.keys() == fast.keys() and all(torch.equal(full[n], fast[n]) for n in full)
    assert any("lora_B" in n and torch.count_nonzero(p) for n, p in fast.items())  # it did train (B starts at 0)
