"""Evaluation statistics: pass^k, bootstrap intervals over tasks, paired differences, confusion."""

from __future__ import annotations

import pytest

from gapforge.evaluation import stats


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


def _episodes(diffs: dict[str, list[int]], *, base_success: bool = False) -> tuple[dict, dict]:
    """Hand-made paired trials: per task, the policy's success minus the base's (+1, 0 or -1) per trial."""
    policy, base = {}, {}
    for t, ds in diffs.items():
        policy[t], base[t] = {}, {}
        for i, d in enumerate(ds):
            b = 1 if d < 0 else (0 if d > 0 else int(base_success))
            base[t][i] = (float(b), bool(b))
            policy[t][i] = (float(b + d), bool(b + d))
    return policy, base


def test_paired_episodes_constant_difference_is_bounded_by_what_its_pairs_can_carry() -> None:
    # every pair the same: no resample differs, so the bootstrap alone would say [1, 1], certainty five pairs cannot
    # carry; the interval is instead the Clopper-Pearson bound on the share of pairs that could deviate
    policy, base = _episodes({"t1": [1, 1, 1], "t2": [1, 1]})
    d = stats.paired_episodes(policy, base, n_boot=300, seed=3)
    assert (d["episodes"], d["tasks"]) == (5, 2)
    u = 1 - 0.025 ** (1 / 5)
    assert d["pass_rate"] == pytest.approx({"value": 1.0, "low": 1.0 - 2 * u, "high": 1.0})
    assert d["mean_reward"] == d["pass_rate"]


@pytest.mark.parametrize(("n_tasks", "trials", "half_width"), [(5, 1, 0.522), (6, 8, 0.074)])
def test_paired_episodes_all_tied_at_zero_is_not_read_as_certainty(
    n_tasks: int, trials: int, half_width: float
) -> None:
    # the demo's compound family (5 tasks, one pair each) and bench/effect's lookups (6 x 8), every pair tied at 0
    policy, base = _episodes({f"t{i}": [0] * trials for i in range(n_tasks)})
    pr = stats.paired_episodes(policy, base, n_boot=300)["pass_rate"]
    assert pr["value"] == 0.0
    assert (pr["low"], pr["high"]) == pytest.approx((-half_width, half_width), abs=1e-3)


def test_paired_episodes_tied_successes_with_rewards_outside_0_1_keep_the_bootstrap_for_the_reward() -> None:
    policy = {"t1": {0: (5.0, False), 1: (5.0, False)}}
    base = {"t1": {0: (2.0, False), 1: (2.0, False)}}
    d = stats.paired_episodes(policy, base, n_boot=100)
    assert d["pass_rate"]["low"] < 0 < d["pass_rate"]["high"]  # success ties at 0: bounded
    assert d["mean_reward"] == {"value": 3.0, "low": 3.0, "high": 3.0}  # no bound on a reward of unknown range


def test_paired_episodes_interval_narrows_as_pairs_grow_and_is_seeded() -> None:
    pattern = [1, 0, -1, 1, 0]
    small = _episodes({f"t{i}": pattern for i in range(4)})
    large = _episodes({f"t{i}": pattern * 8 for i in range(4)})
    a = stats.paired_episodes(*small, n_boot=500, seed=0)
    b = stats.paired_episodes(*large, n_boot=500, seed=0)
    assert a["pass_rate"]["value"] == pytest.approx(0.2) == b["pass_rate"]["value"]
    width = lambda d: d["pass_rate"]["high"] - d["pass_rate"]["low"]
    assert 0 < width(b) < width(a)
    assert a["pass_rate"]["low"] <= 0.2 <= a["pass_rate"]["high"]
    assert stats.paired_episodes(*small, n_boot=500, seed=0) == a  # same inputs, same interval
    assert (a["episodes"], b["episodes"]) == (20, 160)


def test_paired_episodes_one_trial_per_task_still_has_an_interval() -> None:
    # six tasks, one pair each, two of them lost: resampling pairs only within fixed tasks would give
    # [-1/3, -1/3], certainty that six episodes cannot carry; drawing the tasks too gives the honest width
    policy, base = _episodes({f"t{i}": [-1] if i < 2 else [0] for i in range(6)}, base_success=True)
    d = stats.paired_episodes(policy, base, n_boot=1000, seed=0)
    assert d["pass_rate"]["value"] == pytest.approx(-1 / 3)
    assert d["pass_rate"]["low"] < -1 / 3 < d["pass_rate"]["high"]
    assert d["pass_rate"]["high"] >= 0.0  # (4/6)^6 = 9% of resamples hold no lost task: 0 is inside


def test_paired_episodes_interval_counts_differences_between_tasks() -> None:
    # the same mean (+0.5) from two tasks that agree and from two that do not: only the second is uncertain
    same = _episodes({"t1": [1, 0] * 10, "t2": [1, 0] * 10})
    split = _episodes({"t1": [1] * 20, "t2": [0] * 20})
    a = stats.paired_episodes(*same, n_boot=1000, seed=0)["pass_rate"]
    b = stats.paired_episodes(*split, n_boot=1000, seed=0)["pass_rate"]
    assert a["value"] == pytest.approx(0.5) == b["value"]
    assert (b["low"], b["high"]) == (0.0, 1.0)  # a draw of two tasks can hold either one twice
    assert b["high"] - b["low"] > a["high"] - a["low"]


def test_paired_episodes_leave_out_unpaired_episodes_and_weigh_tasks_equally() -> None:
    policy, base = _episodes({"t1": [1, 1], "t2": [0, 0]})
    policy["t1"][2] = (1.0, True)  # trial 2 only on the policy's side
    del base["t2"][1]  # trial 1 of t2 only on the policy's side
    policy["t3"] = {0: (1.0, True)}  # a task base never played
    d = stats.paired_episodes(policy, base, n_boot=200)
    assert (d["episodes"], d["tasks"]) == (3, 2)
    assert d["pass_rate"]["value"] == pytest.approx((1.0 + 0.0) / 2)  # mean over tasks of the task's mean difference
    fam = stats.paired_by_family(policy, base, {"t1": "a", "t2": "b", "t3": "a"}, n_boot=200)
    assert set(fam) == {"a", "b"}
    assert (fam["a"]["episodes"], fam["a"]["pass_rate"]["value"]) == (2, 1.0)
    assert (fam["b"]["episodes"], fam["b"]["pass_rate"]["value"]) == (1, 0.0)
    none = stats.paired_episodes(policy, base, tasks=["t3"])
    assert none["episodes"] == 0 and none["pass_rate"]["value"] is None


def test_as_trials_keeps_sample_order() -> None:
    assert stats.as_trials({"t": {2: (0.2, False), 0: (0.0, False), 1: (1.0, True)}}) == {
        "t": [(0.0, False), (1.0, True), (0.2, False)]
    }
