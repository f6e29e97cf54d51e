"""The rollout-scaling curve from stored evaluations: points paired across adapters, TRACE's rollouts summed over its
adapters, point 0 = the base, the table's verdicts, points per 1,000 rollouts, the plot."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gapforge.evaluation.rollout_scaling import (
    ScalingError,
    curve_points,
    per_1000,
    run_curve_points,
    scale_run_id,
    scaling_plot,
    scaling_rows,
    scaling_table,
)


def _adapter(name: str, steps: list[int], per_step: int = 16, max_steps: int | None = None) -> Any:
    top = max_steps or max(steps)
    return SimpleNamespace(
        name=name,
        status="done",
        metrics={
            "curve_adapters": [
                {"step": s, "fraction": s / top, "training_rollouts": s * per_step, "path": f"/a/{name}/{s}"}
                for s in steps
            ]
        },
    )


def _iv(v: float, half: float) -> dict[str, float]:
    return {"value": v, "low": v - half, "high": v + half}


class _Store:
    def __init__(self, evals: dict[str, dict[str, Any]]) -> None:
        self.evals = evals

    def evaluations(self, run_id: str) -> list[Any]:
        if run_id not in self.evals:
            raise LookupError(f"unknown run {run_id!r}")  # as store.Store does
        return [SimpleNamespace(name=f"eval:{n}", metrics=m) for n, m in self.evals[run_id].items()]

    def list_runs(self) -> list[Any]:
        return [SimpleNamespace(id=r) for r in self.evals]


def test_points_pair_each_adapters_step_at_the_same_fraction_and_refuse_unequal_curves() -> None:
    rows = [
        _adapter("a", [0, 4, 8, 12, 16]),
        _adapter("b", [0, 4, 8, 12, 16]),
        _adapter("baseline_grpo_target", [0, 8, 16, 24, 32]),
    ]
    points = curve_points(rows, ["a", "b"], ["baseline_grpo_target"])
    assert [p["baseline_grpo_target"]["step"] for p in points] == [0, 8, 16, 24, 32] and points[2]["a"]["step"] == 8
    stopped = _adapter("baseline_grpo_target", [0, 8, 16], max_steps=32)  # early stopping ended it at step 20 of 32
    points = curve_points([*rows[:2], stopped], ["a", "b"], ["baseline_grpo_target"])
    assert len(points) == 5 and ["baseline_grpo_target" in p for p in points] == [True, True, True, False, False]
    with pytest.raises(ScalingError, match="early_stopping=false"):
        curve_points([_adapter("a", [0, 4], max_steps=8), _adapter("b", [0, 4, 8])], ["a", "b"])
    with pytest.raises(ScalingError, match="no scaling-curve adapters kept for c"):
        curve_points(rows, ["a", "c"])


def test_a_runs_points_take_its_done_adapters_with_the_baseline_where_it_has_them() -> None:
    failed = SimpleNamespace(name="c", status="failed", metrics={})
    stopped = _adapter("baseline_grpo_target", [0, 8, 16], max_steps=32)
    points = run_curve_points([_adapter("b", [0, 4, 8, 12, 16]), failed, stopped, _adapter("a", [0, 4, 8, 12, 16])])
    assert [sorted(p) for p in points] == [["a", "b", "baseline_grpo_target"]] * 3 + [["a", "b"]] * 2
    assert [sorted(p) for p in run_curve_points([_adapter("a", [0, 8, 16])])] == [["a"]] * 3  # no baseline trained
    with pytest.raises(ScalingError, match="no scaling-curve adapters kept for a"):
        run_curve_points([SimpleNamespace(name="a", status="done", metrics={}), stopped])


def test_rows_table_and_rate_from_stored_points(monkeypatch, tmp_path) -> None:
    import gapforge.evaluation.comparison as comparison

    points = curve_points(
        [_adapter("a", [0, 8, 16]), _adapter("baseline_grpo_target", [0, 8, 16])], ["a"], ["baseline_grpo_target"]
    )
    evals = {
        "r": {"base": {"pass_rate": _iv(0.4, 0.1)}},
        scale_run_id("r", 1): {
            "trace_routed": {"pass_rate": _iv(0.6, 0.1), "vs_base_paired": {"pass_rate": _iv(0.2, 0.05)}},
            "baseline_grpo_target": {"pass_rate": _iv(0.45, 0.1), "vs_base_paired": {"pass_rate": _iv(0.05, 0.08)}},
        },
        scale_run_id("r", 2): {
            "trace_routed": {"pass_rate": _iv(0.8, 0.1), "vs_base_paired": {"pass_rate": _iv(0.4, 0.05)}},
            "baseline_grpo_target": {"pass_rate": _iv(0.8, 0.1), "vs_base_paired": {"pass_rate": _iv(0.4, 0.05)}},
        },
    }
    trace_minus_grpo = iter([_iv(0.15, 0.05), _iv(0.0, 0.06)])
    monkeypatch.setattr(
        comparison, "paired_between", lambda store, a, b, seed=0: {"all tasks": {"pass_rate": next(trace_minus_grpo)}}
    )
    rows = scaling_rows(_Store(evals), "r", points)
    assert [(r["point"], r["trace_rollouts"], r["grpo_rollouts"]) for r in rows] == [
        (0, 0, 0),
        (1, 128, 128),
        (2, 256, 256),
    ]
    assert rows[0]["trace"] == rows[0]["grpo"] == _iv(0.4, 0.1)  # point 0: the base itself
    table = scaling_table(rows)
    assert (
        table[2].endswith("both are the base |") and table[3].endswith("TRACE ahead |") and table[4].endswith("tied |")
    )
    assert per_1000(rows, "trace") == pytest.approx(40 / 256 * 1000) and per_1000(rows, "grpo") == pytest.approx(
        40 / 256 * 1000
    )
    assert scaling_plot({"seed 0": rows}, tmp_path / "s.png").stat().st_size > 1000
    del evals[scale_run_id("r", 2)]
    trace_minus_grpo = iter([_iv(0.15, 0.05)])
    assert [r["point"] for r in scaling_rows(_Store(evals), "r", points)] == [
        0,
        1,
    ]  # a point not evaluated (its run not made yet) is left out
