"""The end-of-run summary lines (three verdicts) and the report's paired-difference
table and forest plot, from hand-made stored metrics (no model, no env)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gapforge.evaluation.report import write_report
from gapforge.evaluation.summary import NO_EFFECT_LINE, headline, points, verdict


def _iv(value: float, low: float, high: float) -> dict[str, float]:
    return {"value": value, "low": low, "high": high}


def _paired(value: float, low: float, high: float, n: int = 40) -> dict[str, Any]:
    return {"episodes": n, "tasks": n // 8, "pass_rate": _iv(value, low, high), "mean_reward": _iv(value, low, high)}


def _metrics(
    rate: float,
    *,
    paired: dict[str, Any] | None,
    by_family_paired: dict[str, Any] | None,
    focus: str | None = "refusal",
) -> dict[str, Any]:
    fam = {"episodes": 40, "tasks": 5, "pass_rate": _iv(rate, rate - 0.1, rate + 0.1)}
    return {
        "env": "shop",
        "trials": 2,
        "tasks": 8,
        "episodes": 56,
        "focus_family": focus,
        "trials_by_family": {"refusal": 8, "lookup": 2},
        "pass_rate": _iv(rate, rate - 0.1, rate + 0.1),
        "mean_reward": _iv(rate, rate - 0.1, rate + 0.1),
        "pass_hat_k": {"1": rate},
        "by_family": {"refusal": fam, "lookup": {**fam, "episodes": 6}},
        "vs_base": None if paired is None else _paired(0.05, -0.1, 0.2),
        "vs_base_paired": paired,
        "vs_base_by_family": by_family_paired,
    }


def _by_name(focus_iv: tuple[float, float, float]) -> dict[str, dict[str, Any]]:
    fams = {"refusal": _paired(*focus_iv), "lookup": _paired(-0.02, -0.1, 0.06, n=6)}
    return {
        "base": _metrics(0.3, paired=None, by_family_paired=None),
        "trace_routed": _metrics(0.5, paired=_paired(*focus_iv), by_family_paired=fams),
    }


@pytest.mark.parametrize(
    ("focus_iv", "word"),
    [
        ((0.2, 0.05, 0.35), "gain"),
        ((-0.2, -0.35, -0.05), "loss"),
        ((0.1, -0.02, 0.22), NO_EFFECT_LINE),
        ((0.0, 0.0, 0.1), NO_EFFECT_LINE),
    ],
)
def test_headline_verdicts(focus_iv: tuple[float, float, float], word: str) -> None:
    lines = headline(_by_name(focus_iv), "refusal")
    assert lines[0] == "refusal: base 30.0% (40 episodes) -> TRACE (routed) 50.0% (40 episodes)"
    value, low, high = (100 * x for x in focus_iv)
    assert (
        lines[1] == f"refusal: TRACE − base {value:+.1f} points [{low:+.1f}, {high:+.1f}], 40 paired episodes: {word}"
    )
    assert lines[2:] == ["lookup: TRACE − base -2.0 points [-10.0, +6.0], 6 paired episodes"]
    assert headline(_by_name(focus_iv), None) == lines  # the focus family stored with the metrics


def test_verdict_words_and_missing_inputs() -> None:
    assert [verdict(_iv(0, lo, hi)) for lo, hi in [(0.01, 0.2), (-0.2, -0.01), (-0.1, 0.1), (0.0, 0.1)]] == [
        "gain",
        "loss",
        "no effect",
        "no effect",
    ]
    assert verdict(None) is None
    # decided on the ends as printed: "[+0.0, +14.2]" is no lead, "[+0.1, ...]" is
    assert points(_iv(0.058, 0.0004, 0.142)) == "+5.8 points [+0.0, +14.2]" and verdict(_iv(0.058, 0.0004, 0.142)) == (
        "no effect"
    )
    assert verdict(_iv(0.058, 0.0006, 0.142)) == "gain" and verdict(_iv(-0.05, -0.1, -0.0004)) == "no effect"
    assert headline({"base": _metrics(0.3, paired=None, by_family_paired=None)}, "refusal")[0].startswith("no summary")
    assert headline(_by_name((0.2, 0.05, 0.35)), "unknown_family")[0].startswith(
        "focus family 'unknown_family' was not evaluated"
    )


@dataclass
class _Row:
    name: str
    metrics: dict[str, Any] = field(default_factory=dict)


class _Store:
    def __init__(self, evals: dict[str, dict[str, Any]]) -> None:
        self.rows = [_Row(f"eval:{n}", m) for n, m in evals.items()]

    def evaluations(self, run_id: str) -> list[_Row]:
        return self.rows

    def get_evaluation(self, run_id: str, name: str) -> None:
        return None

    def adapters(self, run_id: str) -> list[Any]:
        return []


def test_report_has_the_forest_plot_and_says_no_effect_exactly_when_the_interval_contains_0(tmp_path: Path) -> None:
    evals = _by_name((0.2, 0.05, 0.35))  # trace_routed: gain on all tasks and on refusal, lookup contains 0
    fams = {"refusal": _paired(-0.1, -0.2, 0.05), "lookup": _paired(-0.15, -0.25, -0.05, n=6)}
    evals["adapter:x"] = _metrics(0.3, paired=_paired(0.0, -0.1, 0.1), by_family_paired=fams)
    report = write_report(_Store(evals), "r1", tmp_path)
    forest = tmp_path / "eval_forest.png"
    assert forest in report.plots and forest.stat().st_size > 1000
    text = report.path.read_text()
    assert "![paired differences](eval_forest.png)" in text and "Focus family: `refusal`." in text
    paired_table = text.split("### Paired differences vs base")[1].split("![paired")[0]
    rows = [line for line in paired_table.splitlines() if line.startswith(("| trace_routed |", "| adapter:x |"))]
    cells = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in rows}
    assert len(cells) == len(rows)
    assert set(cells) == {(p, s) for p in ("trace_routed", "adapter:x") for s in ("all tasks", "refusal", "lookup")}
    contains_zero = {("trace_routed", "lookup"), ("adapter:x", "all tasks"), ("adapter:x", "refusal")}
    for key, line in cells.items():
        assert ("no effect" in line) == (key in contains_zero), line
    assert cells[("trace_routed", "all tasks")].endswith("| gain |") and cells[("adapter:x", "lookup")].endswith(
        "| loss |"
    )
    assert "| trace_routed | all tasks | 40 (5) | +20.0 points [+5.0, +35.0] | +0.200 [+0.050, +0.350] | gain |" in text
    assert "Family `refusal`: trials per task base 8, adapter:x 8, trace_routed 8 (other policies 2)." in text
