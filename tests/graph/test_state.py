"""Reducers of the graph state: parallel capability branches merge, costs add up."""

from gapforge.graph.state import add_costs, merge_dicts


def test_merge_dicts_updates_rows_field_by_field() -> None:
    left = {"alpha": {"status": "retained", "gap": 0.5}, "beta": {"status": "retained"}}
    right = {"alpha": {"status": "trained"}, "gamma": {"status": "rejected"}}
    assert merge_dicts(left, right) == {
        "alpha": {"status": "trained", "gap": 0.5},
        "beta": {"status": "retained"},
        "gamma": {"status": "rejected"},
    }
    assert merge_dicts(None, {"label": "1/3"}) == {"label": "1/3"}
    assert merge_dicts({"label": "1/3"}, {"label": "done"}) == {"label": "done"}


def test_add_costs_sums_per_stage() -> None:
    total = add_costs(
        {"label": {"llm_calls": 10, "wall_s": 1.5}}, {"label": {"llm_calls": 10}, "train": {"cpu_s": 2.0}}
    )
    assert total == {"label": {"llm_calls": 20, "wall_s": 1.5}, "train": {"cpu_s": 2.0}}
