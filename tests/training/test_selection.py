"""The selection rule: a checkpoint replaces step 0 only when its paired gain is above the held-out noise."""

from __future__ import annotations

from pathlib import Path

from gapforge.training.config import TrainingConfig
from gapforge.training.selection import HeldoutSelector, beats_step0, paired_margin


def _entry(step: int, rewards: list[float]) -> dict:
    return {"step": step, "reward": sum(rewards) / len(rewards), "rewards": rewards}


def _selector(tmp_path: Path, *entries: dict) -> HeldoutSelector:
    sel = HeldoutSelector(tmp_path, evaluate=lambda _m: {}, cfg=TrainingConfig.tiny())
    sel.curve = list(entries)
    return sel


def test_paired_margin_is_the_mean_difference_and_its_lower_bound() -> None:
    m = paired_margin([1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0])
    assert m is not None and m["diff"] == 0.5 and m["n"] == 4
    assert m["low"] < 0.5  # the bound pays for the spread
    assert paired_margin([1.0, 0.0], [0.0]) is None  # not paired
    assert paired_margin([1.0], [0.0]) is None  # too few rollouts for a spread


def test_one_lucky_episode_does_not_replace_step0(tmp_path: Path) -> None:
    """The old rule kept any higher mean: +1/16 from one rollout was 'up'. Now step 0 stays."""
    base = [0.1] * 16
    lucky = [0.1] * 15 + [1.0]
    sel = _selector(tmp_path, _entry(0, base), _entry(4, lucky))
    assert sel.curve[1]["reward"] > sel.curve[0]["reward"]
    assert not beats_step0(sel.curve[1], sel.curve[0])
    assert sel.best is not None and sel.best["step"] == 0


def test_a_consistent_gain_wins_and_the_best_passing_checkpoint_is_kept(tmp_path: Path) -> None:
    base = [0.0, 0.2, 0.1, 0.0, 0.2, 0.1, 0.0, 0.1]
    small = [x + 0.2 for x in base]
    large_but_noisy = [1.0, 1.0] + base[2:]  # a higher mean that two rollouts carry
    larger = [x + 0.4 for x in base]
    sel = _selector(tmp_path, _entry(0, base), _entry(4, small), _entry(8, large_but_noisy), _entry(12, larger))
    assert sel.best is not None and sel.best["step"] == 12
    sel = _selector(tmp_path, _entry(0, base), _entry(4, small), _entry(8, large_but_noisy))
    assert sel.curve[2]["reward"] > sel.curve[1]["reward"]
    assert sel.best is not None and sel.best["step"] == 4


def test_entries_without_per_rollout_rewards_never_replace_step0(tmp_path: Path) -> None:
    sel = _selector(tmp_path, {"step": 0, "reward": 0.1}, {"step": 4, "reward": 0.9})
    assert sel.best is not None and sel.best["step"] == 0
