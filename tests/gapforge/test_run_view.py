"""The end-of-run lines built from a run's state (gapforge/run_view.py)."""

from __future__ import annotations

from gapforge.run_view import stage_times


def test_stage_times_lists_each_stage_and_how_long_the_invocation_took() -> None:
    values = {
        "cost": {
            "collect_rollouts": {"wall_s": 190.4, "policy_rollouts": 264},
            "label": {"llm_calls": 5},
            "train": {"wall_s": 709.6},
            "evaluate": {"wall_s": 0.0},
        }
    }
    assert stage_times(values, 1200.0) == (
        "stage times (summed over capability branches): collect_rollouts 190 s, train 710 s, "
        "evaluate 0 s; this invocation took 20.0 min"
    )
    assert stage_times(values).endswith("evaluate 0 s")


def test_no_stage_times_before_any_stage_has_spent_time() -> None:
    assert stage_times({}) is None
    assert stage_times({"cost": {"label": {"llm_calls": 3}}}) is None
