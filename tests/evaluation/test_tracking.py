"""The evaluation's summary in the trackers (evaluation/tracking.py): tensorboard event files read back hold every
split's numbers and the printed lines; a tracker that fails returns its line and never raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gapforge.evaluation.tracking import log_evaluation, summary_scalars
from gapforge.store import Store

pytest.importorskip("tensorboard", reason="extra 'tracking' not installed (pip install -e .[tracking]); CI installs it")


def _iv(value: float) -> dict[str, float]:
    return {"value": value, "low": value - 0.1, "high": value + 0.1}


def _metrics(rate: float, paired: float | None) -> dict[str, Any]:
    diff = (
        None if paired is None else {"episodes": 40, "tasks": 20, "pass_rate": _iv(paired), "mean_reward": _iv(paired)}
    )
    return {
        "env": "shop",
        "trials": 2,
        "tasks": 20,
        "episodes": 40,
        "pass_rate": _iv(rate),
        "mean_reward": _iv(rate),
        "pass_hat_k": {"1": rate},
        "by_family": {},
        "vs_base_paired": diff,
        "vs_base_by_family": {} if diff is None else {"policy_refusal": diff},
    }


@pytest.fixture
def evaluated(tmp_path: Path) -> tuple[Store, str]:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    run = store.create_run("trace", {})
    store.put_evaluation(run, "eval:base", policy="base", metrics=_metrics(0.25, None))
    store.put_evaluation(run, "eval:trace_routed", policy="trace_routed", metrics=_metrics(0.55, 0.30))
    store.put_evaluation(run, "unseen:base", policy="base", metrics=_metrics(0.2, None))
    store.put_evaluation(run, "unseen:trace_routed", policy="trace_routed", metrics=_metrics(0.5, 0.25))
    yield store, run
    store.close()


def test_the_summary_reaches_tensorboard_per_split_with_the_printed_lines(
    evaluated: tuple[Store, str], tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store, run = evaluated
    scalars = summary_scalars(store, run)
    assert scalars["eval/trace_routed/vs_base/pass_rate"] == pytest.approx(0.30)
    assert scalars["unseen/trace_routed/vs_base/policy_refusal/pass_rate_low"] == pytest.approx(0.15)
    assert "eval/base/vs_base/pass_rate" not in scalars  # base is not paired with itself
    where = tmp_path / "tracking" / run / "evaluation"
    assert log_evaluation(["tensorboard"], store, run, where) == []
    events = EventAccumulator(str(where), size_guidance={"tensors": 0}).Reload()
    read = {tag: events.Scalars(tag)[0].value for tag in events.Tags()["scalars"]}
    assert read.keys() == scalars.keys()
    assert all(read[k] == pytest.approx(v, abs=1e-6) for k, v in scalars.items())
    text = events.Tensors("evaluation/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "TRACE − base +30.0 points [+20.0, +40.0], 40 paired episodes: gain" in text  # the printed line, both splits
    assert "TRACE − base +25.0 points [+15.0, +35.0]" in text


def test_a_failing_tracker_is_a_line_not_a_failed_evaluation(
    evaluated: tuple[Store, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    store, run = evaluated
    wandb = types.ModuleType("wandb")

    def init(**kwargs: Any) -> None:
        raise RuntimeError("api key not configured (no-tty)")

    wandb.init = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", wandb)  # a tracker whose login fails
    problems = log_evaluation(["wandb", "tensorboard"], store, run, tmp_path / "x")
    assert problems == ["wandb: the evaluation summary was not logged (RuntimeError: api key not configured (no-tty))"]
    assert list((tmp_path / "x").glob("events.out.tfevents.*"))  # the next tracker still got it
    assert log_evaluation([], store, run, tmp_path / "y") == [] and not (tmp_path / "y").exists()
