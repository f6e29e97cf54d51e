"""The end-of-run lines built from a run's state (gapforge/run_view.py)."""

from __future__ import annotations

from gapforge.run_view import stage_times


def test_stage_times_lists_each_stage_and_the_total_in_minutes() -> None:
    values = {"cost": {"collect_rollouts": {"wall_s": 190.4, "policy_rollouts": 264}, "label": {"llm_calls": 5},
                       "capability": {"wall_s": 709.6}, "evaluate": {"wall_s": 300.0}}}
    assert stage_times(values) == "stage times: collect_rollouts 190 s, capability 710 s, evaluate 300 s; total 20.0 min"


def test_no_stage_times_before_any_stage_has_spent_time() -> None:
    assert stage_times({}) is None
    assert stage_times({"cost": {"label": {"llm_calls": 3}}}) is None
