"""Statistics against hand computation (DESIGN §1 step 2): undefined rates, CIs, kappa, the vote."""

from __future__ import annotations

import pytest

from gapforge.agents.analysis.statistics import LabelRecord, compute_statistics, fleiss_kappa

# four tasks, one episode each: e1, e2 succeed; e3, e4 fail
EPISODES = {1: ("t1", True), 2: ("t2", True), 3: ("t3", False), 4: ("t4", False)}
PASS0 = {
    "a": {1: "PRESENT", 2: "LACKING", 3: "LACKING", 4: "LACKING"},  # ER+ 1/2, ER- 2/2, gap .5, cov 2/2
    "b": {1: "NA", 2: "NA", 3: "LACKING", 4: "PRESENT"},  # ER+ undefined -> gap undefined
    "c": {1: "PRESENT", 2: "PRESENT", 3: "NA", 4: "NA"},  # ER- undefined; coverage 0/2 = 0
    "d": {1: "PRESENT", 2: "PRESENT", 3: "LACKING", 4: "PRESENT"},  # ER+ 0, ER- 1/2, gap .5, cov 1/2
}


def records(passes: dict[int, dict[str, dict[int, str]]]) -> list[LabelRecord]:
    out = []
    for p, caps in passes.items():
        for cap, labels in caps.items():
            for eid, value in labels.items():
                task, success = EPISODES[eid]
                out.append(LabelRecord(eid, task, success, cap, p, value))
    return out


def stats(passes: dict[int, dict[str, dict[int, str]]], **kw):
    kw = {"delta": 0.2, "rho": 0.1, "required_passes": len(passes), "bootstrap": 500, "seed": 1} | kw
    return {s.capability: s for s in compute_statistics(records(passes), list(passes[0]), sorted(passes), **kw)}


def test_rates_match_hand_computation_and_undefined_is_none() -> None:
    s = stats({0: PASS0})
    a, b, c = s["a"], s["b"], s["c"]
    assert (a.er_plus, a.er_minus, a.gap, a.coverage) == (0.5, 1.0, 0.5, 1.0)
    assert b.er_plus is None and b.er_minus == 0.5 and b.gap is None  # never 0 (the reference code's 0 would give 0.5)
    assert c.er_minus is None and c.gap is None and c.coverage == 0.0
    assert a.per_pass[0].kept and a.retained and a.verdict == "retained"
    assert not b.retained and b.verdict == "insufficient evidence"
    assert not c.retained and c.verdict == "insufficient evidence"


def test_identical_passes_give_kappa_one_and_pooled_rates_equal_one_pass() -> None:
    s = stats({0: PASS0, 1: PASS0, 2: PASS0})
    assert s["a"].kappa == 1.0 and s["b"].kappa == 1.0
    assert s["a"].gap == 0.5 and s["a"].kept_passes == 3


def test_bootstrap_intervals_contain_the_point_estimate() -> None:
    s = stats({0: PASS0, 1: PASS0})
    lo, hi = s["a"].gap_ci
    assert lo <= s["a"].gap <= hi and lo < hi
    clo, chi = s["a"].coverage_ci
    assert clo <= s["a"].coverage <= chi
    assert s["b"].gap_ci is not None or s["b"].gap is None
    assert stats({0: PASS0}, bootstrap=0)["a"].gap_ci is None


def test_vote_needs_k_of_r_passes() -> None:
    flipped = {**PASS0, "a": {1: "LACKING", 2: "LACKING", 3: "LACKING", 4: "PRESENT"}}  # gap 1/2 - 1 = -0.5: not kept
    s = stats({0: PASS0, 1: PASS0, 2: flipped}, required_passes=3)
    assert s["a"].kept_passes == 2 and not s["a"].retained and s["a"].verdict == "unstable"
    assert stats({0: PASS0, 1: PASS0, 2: flipped}, required_passes=2)["a"].retained
    # pooled over passes: ER+ = (1+1+2)/6, ER- = (2+2+1)/6
    assert s["a"].gap == pytest.approx(5 / 6 - 4 / 6)
    assert s["a"].kappa is not None and s["a"].kappa < 1.0


def test_thresholds_delta_and_rho() -> None:
    assert not stats({0: PASS0}, delta=0.6)["a"].retained  # gap .5 < .6
    d = stats({0: PASS0}, rho=0.5)["d"]
    assert (d.gap, d.coverage, d.retained) == (0.5, 0.5, True)  # thresholds are inclusive
    assert not stats({0: PASS0}, rho=0.51)["d"].retained


def test_labeling_failure_leaves_the_episode_out_of_denominators() -> None:
    partial = {cap: {e: v for e, v in labels.items() if e != 4} for cap, labels in PASS0.items()}  # e4 failed to label
    a = stats({0: partial})["a"]
    assert (a.er_plus, a.er_minus, a.coverage) == (0.5, 1.0, 1.0)  # 1/1 failure, not 1/2


def test_fleiss_kappa_hand_example() -> None:
    # subjects x (NA, PRESENT, LACKING), 2 raters: P = [1, 0], p = [3/4, 1/4, 0], Pe = 10/16
    assert fleiss_kappa([[2, 0, 0], [1, 1, 0]]) == pytest.approx((0.5 - 0.625) / 0.375)
    assert fleiss_kappa([[2, 0, 0], [2, 0, 0]]) == 1.0  # full agreement on one category
    assert fleiss_kappa([]) is None and fleiss_kappa([[1, 0, 0]]) is None


def test_max_retained_keeps_the_largest_gaps_and_defers_the_rest() -> None:
    """a and d both pass (gap .5); a covers more failures (1.0 against .5), so with max_retained=1 a stays and d is
    deferred with its statistics intact; without the cap both are retained."""
    both = stats({0: PASS0})
    assert both["a"].retained and both["d"].retained
    one = stats({0: PASS0}, max_retained=1)
    assert one["a"].retained and one["a"].verdict == "retained"
    assert not one["d"].retained and one["d"].verdict == "deferred" and one["d"].gap == both["d"].gap == 0.5
    assert one["b"].verdict == "insufficient evidence"  # the cap never touches what the vote did not retain


def test_an_excluded_capability_is_not_retained_and_leaves_its_place_under_max_retained() -> None:
    """`exclude` takes a passing capability out before the max_retained cut: with a excluded, d (deferred by a before)
    is retained; a keeps its statistics under the verdict "excluded"; what the vote did not retain stays as it was."""
    out = stats({0: PASS0}, max_retained=1, exclude={"a", "b"})
    assert not out["a"].retained and out["a"].verdict == "excluded" and out["a"].gap == 0.5
    assert out["d"].retained and out["d"].verdict == "retained"
    assert out["b"].verdict == "insufficient evidence"
