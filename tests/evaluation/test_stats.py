"""Evaluation statistics: pass^k, bootstrap intervals over tasks, paired differences, confusion."""

from __future__ import annotations

import pytest

from evaluation import stats


def test_pass_hat_k_matches_the_tau2_definition() -> None:
    # task 1: 2 of 4 succeed -> pass^1 = 0.5, pass^2 = C(2,2)/C(4,2) = 1/6; task 2: 4 of 4 -> 1, 1
    succ = [[True, True, False, False], [True] * 4]
    assert stats.pass_hat_k(succ, 1) == pytest.approx(0.75)
    assert stats.pass_hat_k(succ, 2) == pytest.approx((1 / 6 + 1) / 2)
    assert stats.pass_hat_k(succ, 5) is None


def test_summary_interval_brackets_the_value_and_is_seeded() -> None:
    trials = {f"t{i}": [(float(i % 3) / 2, i % 3 == 2)] * 2 for i in range(12)}
    a = stats.summarize(trials, n_boot=300, seed=1)
    b = stats.summarize(trials, n_boot=300, seed=1)
    assert a == b
    pr = a["pass_rate"]
    assert pr["low"] <= pr["value"] <= pr["high"] and pr["low"] < pr["high"]
    assert pr["value"] == pytest.approx(4 / 12)
    assert a["pass_hat_k"]["2"] == pytest.approx(4 / 12)


def test_paired_difference_is_policy_minus_base_on_common_tasks() -> None:
    base = {f"t{i}": [(0.0, False)] for i in range(10)}
    better = {f"t{i}": [(1.0, True)] if i < 6 else [(0.0, False)] for i in range(10)}
    better["extra"] = [(1.0, True)]  # not run by base: ignored
    d = stats.paired_difference(better, base, n_boot=300)
    assert d["tasks"] == 10 and d["pass_rate"]["value"] == pytest.approx(0.6)
    assert d["pass_rate"]["low"] > 0  # clearly better
    fam = stats.by_family(better, {"t0": "refusal"})
    assert set(fam) == {"refusal", "unknown"} and fam["refusal"]["pass_rate"]["value"] == 1.0


def test_confusion_matrix_rows_are_expected() -> None:
    c = stats.confusion([("a", "a"), ("a", "none"), ("none", "none")], ["a", "none"])
    assert c["matrix"] == [[1, 1], [0, 1]] and c["accuracy"] == pytest.approx(2 / 3)
