import pytest

from gapforge.config import GapforgeConfig, TrainingConfig
from gapforge.training.budget import baseline_steps, training_rollout_budget


def _cfg(**training: object) -> GapforgeConfig:
    return GapforgeConfig(training=TrainingConfig.tiny(**training))


def test_budget_follows_the_number_of_adapters() -> None:
    cfg = _cfg(max_steps=20, groups_per_step=2, num_generations=4)
    assert training_rollout_budget(cfg, 1) == 160
    assert training_rollout_budget(cfg, 2) == 320  # a second capability doubles what the baseline may spend
    assert training_rollout_budget(cfg, 0) == 0


def test_baseline_steps_spend_the_same_rollouts_with_the_same_settings() -> None:
    cfg = _cfg(max_steps=20, groups_per_step=2, num_generations=4)
    steps = baseline_steps(cfg, 2)
    assert steps == 40 and steps * cfg.training.rollouts_per_step == training_rollout_budget(cfg, 2)
    assert baseline_steps(cfg, 2, scale=2.0) == 80


def test_bad_counts_are_refused() -> None:
    cfg = _cfg()
    with pytest.raises(ValueError, match="n_adapters"):
        training_rollout_budget(cfg, -1)
    with pytest.raises(ValueError, match="scale"):
        baseline_steps(cfg, 1, scale=0)
