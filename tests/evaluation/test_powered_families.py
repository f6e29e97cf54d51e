"""Every family powered: trials per task from min_family_episodes, intervals wider than ±15 points flagged, a regression
outside the focus family as a line of its own."""

from __future__ import annotations

from typing import Any

from gapforge.evaluation.run import EvalPlan
from gapforge.evaluation.summary import headline

FAMILIES = {
    **{f"r{i}": "refusal" for i in range(5)},
    **{f"l{i}": "lookup" for i in range(6)},
    **{f"a{i}": "address" for i in range(3)},
}


def _plan(**kw: Any) -> EvalPlan:
    return EvalPlan(
        "r",
        "shop",
        sorted(FAMILIES),
        trials=1,
        family_trials_policies=("base", "trace_routed", "baseline_grpo_target"),
        **kw,
    )


def test_min_family_episodes_sets_ceil_of_episodes_over_tasks_per_family() -> None:
    plan = _plan(min_family_episodes=40, family_trials={"refusal": 40})
    counts = plan.task_trials("baseline_grpo_target", FAMILIES)
    per_family = {f: sum(k for t, k in counts.items() if FAMILIES[t] == f) for f in ("refusal", "lookup", "address")}
    assert (
        counts["l0"] == 7 and counts["a0"] == 14 and counts["r0"] == 40
    )  # ceil(40/6), ceil(40/3); family_trials gives more
    assert per_family == {"refusal": 200, "lookup": 42, "address": 42} and min(per_family.values()) >= 40
    assert set(plan.task_trials("adapter:x", FAMILIES).values()) == {1}  # other policies play `trials`
    assert _plan().task_trials("base", FAMILIES) == {t: 1 for t in FAMILIES}  # off by default: nothing changes


def _iv(v: float, lo: float, hi: float) -> dict[str, float]:
    return {"value": v, "low": lo, "high": hi}


def _paired(v: float, lo: float, hi: float, n: int = 42) -> dict[str, Any]:
    return {"episodes": n, "tasks": 6, "pass_rate": _iv(v, lo, hi), "mean_reward": _iv(v, lo, hi)}


def _m(fams: dict[str, Any] | None) -> dict[str, Any]:
    by_family = {f: {"episodes": 42, "pass_rate": _iv(0.5, 0.4, 0.6)} for f in ("refusal", "lookup", "address")}
    return {
        "focus_family": "refusal",
        "by_family": by_family,
        "episodes": 284,
        "vs_base_paired": None,
        "vs_base_by_family": fams,
    }


def test_a_regression_outside_the_focus_family_is_its_own_line_and_wide_intervals_are_flagged() -> None:
    trace = {
        "refusal": _paired(0.8, 0.7, 0.9, 200),
        "lookup": _paired(-0.3, -0.42, -0.16),
        "address": _paired(0.0, -0.4, 0.4, 6),
    }
    grpo = {
        "refusal": _paired(0.1, -0.05, 0.2, 200),
        "lookup": _paired(0.0, -0.1, 0.1),
        "address": _paired(0.0, -0.1, 0.1),
    }
    lines = headline({"base": _m(None), "trace_routed": _m(trace), "baseline_grpo_target": _m(grpo)})
    assert lines[1].endswith("200 paired episodes: gain")
    assert (
        lines[2]
        == "regression outside refusal: lookup: TRACE − base -30.0 points [-42.0, -16.0], 42 paired episodes: loss"
    )
    assert lines[3] == (
        "address: TRACE − base +0.0 points [-40.0, +40.0], 6 paired episodes — underpowered (±40 points > ±15); "
        "GRPO-on-target − base +0.0 points [-10.0, +10.0], 42 paired episodes"
    )
    assert lines[4].startswith("lookup: TRACE − base -30.0") and "underpowered" not in lines[4]
    quiet = headline({"base": _m(None), "trace_routed": _m({**trace, "lookup": _paired(-0.05, -0.12, 0.02)})})
    assert not any(line.startswith("regression") for line in quiet) and not any("GRPO" in line for line in quiet)
