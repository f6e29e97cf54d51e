"""Routed TRACE over a subset of adapters from stored episodes (evaluation/scaling.py): a task the router sent to an
adapter outside the subset plays the base's episodes, the rest the routed policy's; each subset is paired with the
base per family; and the lines the demo prints (the gate's, then the analyses' of evaluation.comparisons: oracle, subsets)
read the stored rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from gapforge.evaluation import stats
from gapforge.evaluation.oracle import oracle_lines
from gapforge.evaluation.registry import summary_lines
from gapforge.evaluation.scaling import (
    gate_line,
    scaling,
    scaling_lines,
    subset_episodes,
    subsets,
)
from gapforge.store import Store

T, F = True, False


def _eps(pattern: list[bool]) -> dict[int, tuple[float, bool]]:
    return {i: (1.0 if s else 0.0, s) for i, s in enumerate(pattern)}


BASE = {"r1": _eps([F, F, F, F]), "r2": _eps([F, T, F, F]), "w1": _eps([F, F, T, F]), "l1": _eps([T, T, F, T])}
ROUTED = {"r1": _eps([T, T, T, F]), "r2": _eps([T, T, T, T]), "w1": _eps([T, F, T, T]), "l1": _eps([T, T, F, T])}
CHOICE = {"r1": "pv", "r2": "pv", "w1": "tap", "l1": None}
FAMILIES = {"r1": "refusal", "r2": "refusal", "w1": "write", "l1": "lookup"}


def test_a_subset_plays_the_routed_episodes_only_where_the_router_chose_one_of_its_adapters() -> None:
    only_pv = subset_episodes(ROUTED, BASE, CHOICE, ["pv"])
    assert only_pv["r1"] == ROUTED["r1"] and only_pv["r2"] == ROUTED["r2"]
    assert only_pv["w1"] == BASE["w1"] and only_pv["l1"] == BASE["l1"]  # tap not loaded: the base answers
    both = subset_episodes(ROUTED, BASE, CHOICE, ["pv", "tap"])
    assert both == {t: ROUTED[t] for t in ROUTED}
    assert subsets(["pv", "tap"]) == [("pv",), ("tap",), ("pv", "tap")] and subsets(["pv"]) == [("pv",)]
    # only the refusal tasks move with pv alone: +5/8 there, the write family ties with the base
    d = stats.paired_by_family(only_pv, BASE, FAMILIES, n_boot=100)
    assert d["refusal"]["pass_rate"]["value"] == pytest.approx((3 / 4 + 3 / 4) / 2)
    assert d["write"]["pass_rate"]["value"] == pytest.approx(0.0)


def _store(tmp_path: Path) -> tuple[Store, str]:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    run = store.create_run("trace", {}, run_id="r1")
    store.put_split(
        run, env="shop", seed=0, fraction=0.5, analysis_tasks=[], heldout_tasks=sorted(FAMILIES), families=FAMILIES
    )
    for name, eps in (("base", BASE), ("trace_routed", ROUTED)):
        child = store.create_run("evaluation", {"parent": run}, run_id=f"{run}.eval.{name}")
        for task, rows in eps.items():
            for sample, (reward, success) in rows.items():
                store.put_episode(
                    child,
                    "shop",
                    task,
                    sample,
                    policy=name,
                    messages=[],
                    reward=reward,
                    success=success,
                    components={},
                    termination="done",
                    error=None,
                    turns=1,
                    timings={},
                )
        metrics = {
            "env": "shop",
            "tasks": len(eps),
            "trials": 4,
            "child_run": child,
            "trials_by_family": {f: 4 for f in set(FAMILIES.values())},
            **stats.summarize(stats.as_trials(eps), n_boot=50),
        }
        if name == "trace_routed":
            metrics["routing"] = {t: {"adapter": a} for t, a in CHOICE.items()}
        store.put_evaluation(run, f"eval:{name}", policy=name, metrics=metrics)
    store.put_evaluation(
        run,
        "router",
        policy="router",
        metrics={
            "capabilities": [
                {"name": "precondition_verification", "adapter": "pv"},
                {"name": "tool_argument_precision", "adapter": "tap"},
            ],
            "gate": {
                "heldout": {
                    "accuracy": 0.75,
                    "labels": ["precondition_verification", "tool_argument_precision", "none"],
                    "n": 8,
                },
                "train_accuracy": 1.0,
                "examples": [{"split": "train"}] * 20 + [{"split": "heldout"}] * 8,
            },
        },
    )
    return store, run


def test_scaling_from_the_store_pairs_each_subset_with_the_base_and_prints_one_line_each(tmp_path: Path) -> None:
    store, run = _store(tmp_path)
    with store:
        m = scaling(store, run, n_boot=100)
        assert m is not None and m["adapters"] == ["pv", "tap"]
        rows = {tuple(r["adapters"]): r for r in m["rows"]}
        assert rows[("tap",)]["tasks_routed"] == ["w1"] and rows[("pv", "tap")]["tasks_routed"] == ["r1", "r2", "w1"]
        assert rows[("tap",)]["by_family"]["write"]["pass_rate"]["value"] == pytest.approx(2 / 4)
        assert rows[("tap",)]["by_family"]["refusal"]["pass_rate"]["value"] == pytest.approx(0.0)
        assert rows[("pv", "tap")]["all"]["episodes"] == 16
        router = store.get_evaluation(run, "router")
        lines = [*gate_line(router.metrics), *summary_lines(store, run, None, "analysis")]  # what the demo prints
    assert lines[0].startswith("gate: held-out accuracy 75% on 8 examples (train 100% on 20)")
    assert any(line.startswith("routed over 2 adapters (pv, tap): TRACE − base all tasks") for line in lines)
    heads = [line.split(":")[0] for line in scaling_lines(m)]
    assert heads == ["routed over 1 adapter (pv)", "routed over 1 adapter (tap)", "routed over 2 adapters (pv, tap)"]
    # no single adapter was evaluated: the oracle's only candidate is the base, so it scores as the base does
    assert any(line.startswith("oracle routing (4 held-out tasks") and "; base 37.5%" in line for line in lines)


def test_nothing_stored_gives_no_lines(tmp_path: Path) -> None:
    assert gate_line(None) == [] and oracle_lines(None) == [] and scaling_lines(None) == []
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store.create_run("demo", {})
        assert summary_lines(store, run, None, "analysis") == []  # no evaluation: no comparison has a line
        assert summary_lines(store, run, None, "baseline") == []


def test_the_report_has_the_scaling_section_and_the_gates_accuracy(tmp_path: Path) -> None:
    from gapforge.evaluation.report import write_report

    store, run = _store(tmp_path)
    with store:
        text = write_report(store, run, tmp_path / "report").path.read_text()
    section = text.split("## Scaling with capabilities")[1].split("## Router")[0]
    assert "| adapters | tasks routed to them | all tasks | lookup | refusal | write |" in section
    assert "| tap | 1 | +12.5 points" in section and "| pv, tap | 3 | +50.0 points" in section
    assert "gate: held-out accuracy 75% on 8 examples" in text.split("## Router")[1]


def test_the_gate_line_says_when_the_served_gate_was_refit_on_every_example() -> None:
    def record(refit: bool | None) -> dict:
        settings = {} if refit is None else {"refit": refit}
        examples = [{"split": "train"}] * 3 + [{"split": "heldout"}]
        return {
            "gate": {
                "heldout": {"accuracy": 1.0, "n": 1, "labels": ["pv", "none"]},
                "train_accuracy": 1.0,
                "examples": examples,
                "settings": settings,
            }
        }

    (line,) = gate_line(record(True))
    assert (
        line
        == "gate: held-out accuracy 100% on 1 examples (train 100% on 3; served gate refit on all 4); classes pv, none"
    )
    assert gate_line(record(False)) == gate_line(record(None)) == [line.replace("; served gate refit on all 4", "")]
