"""The report names the prompt baselines for what they are: a run stored before the rename
(`eval:baseline_hints`) reports under today's name `capability_hints`."""

from __future__ import annotations

from pathlib import Path

from evaluation.policies import CAPABILITY_HINTS, current_name
from evaluation.report import write_report
from tests.evaluation.test_summary_report import _metrics, _paired, _Store


def test_old_names_map_to_todays() -> None:
    assert current_name("eval:baseline_hints") == f"eval:{CAPABILITY_HINTS}"
    assert current_name("baseline_hints") == CAPABILITY_HINTS
    assert current_name("eval:adapter:x") == "eval:adapter:x"


def test_a_run_stored_with_baseline_hints_still_reports(tmp_path: Path) -> None:
    evals = {"base": _metrics(0.3, paired=None, by_family_paired=None),
             "baseline_hints": _metrics(0.35, paired=_paired(0.05, -0.05, 0.15), by_family_paired={})}  # fmt: skip
    text = write_report(_Store(evals), "r1", tmp_path).path.read_text()
    assert "baseline_hints" not in text
    assert "| capability_hints | 35.0% [25.0, 45.0]" in text
