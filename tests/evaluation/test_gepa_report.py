"""The report names the prompt baselines for what they are: a run stored before the rename
(`eval:baseline_hints`) reports under today's name `capability_hints`; the paired table labels GEPA with the
metric calls it spent and the capability hints as unoptimised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapforge.evaluation.gepa_baseline import GEPA_ROW, GepaRecord
from gapforge.evaluation.policies import CAPABILITY_HINTS, current_name
from gapforge.evaluation.report import write_report
from tests.evaluation.test_summary_report import _metrics, _paired, _Row, _Store


def test_old_names_map_to_todays() -> None:
    assert current_name("eval:baseline_hints") == f"eval:{CAPABILITY_HINTS}"
    assert current_name("baseline_hints") == CAPABILITY_HINTS
    assert current_name("eval:adapter:x") == "eval:adapter:x"


def test_a_run_stored_with_baseline_hints_still_reports(tmp_path: Path) -> None:
    evals = {
        "base": _metrics(0.3, paired=None, by_family_paired=None),
        "baseline_hints": _metrics(0.35, paired=_paired(0.05, -0.05, 0.15), by_family_paired={}),
    }
    text = write_report(_Store(evals), "r1", tmp_path).path.read_text()
    assert "baseline_hints" not in text
    assert "| capability_hints | 35.0% [25.0, 45.0]" in text


class _WithGepa(_Store):
    def __init__(self, evals: dict[str, Any], gepa: GepaRecord) -> None:
        super().__init__(evals)
        self.gepa = gepa

    def get_evaluation(self, run_id: str, name: str) -> Any:
        return _Row(name, self.gepa.model_dump(mode="json")) if name == GEPA_ROW else None


def test_the_paired_table_labels_gepa_with_its_metric_calls_and_the_hints_as_unoptimised(tmp_path: Path) -> None:
    record = GepaRecord(
        prompt="p",
        seed_prompt="s",
        prompt_id="gepa@x",
        metric_calls=248,
        max_metric_calls=256,
        tasks=["t"],
        candidates=3,
        seed_score=0.4,
        best_score=0.5,
        reflection_prompt="gepa_reflection@1",
        reflection_calls=5,
        gepa_version="0.1.4",
    )
    evals = {
        "base": _metrics(0.3, paired=None, by_family_paired=None),
        "capability_hints": _metrics(0.3, paired=_paired(0.0, -0.1, 0.1), by_family_paired={}),
        "gepa": _metrics(0.3, paired=_paired(0.01, -0.08, 0.1), by_family_paired={}),
    }
    text = write_report(_WithGepa(evals, record), "r1", tmp_path).path.read_text()
    paired = text.split("### Paired differences vs base")[1]
    assert "| GEPA (prompt optimisation, 248 metric calls) | all tasks | 40 (5) | +1.0 points [-8.0, +10.0]" in paired
    assert "| capability hints (descriptions appended, unoptimised) | all tasks |" in paired
    assert paired.count("no effect") == 2
    assert "| gepa | 30.0%" in text  # the tables above keep the evaluation names


def test_the_evaluation_stage_counts_gepa_only_when_it_optimised_now() -> None:
    from gapforge.graph.context import Cost
    from gapforge.stages.evaluation import gepa_cost

    record = GepaRecord(
        prompt="p",
        seed_prompt="s",
        prompt_id="gepa@x",
        metric_calls=248,
        max_metric_calls=256,
        tasks=["t"],
        candidates=3,
        seed_score=0.2,
        best_score=0.3,
        reflection_prompt="r@1",
        reflection_calls=7,
        gepa_version="0.1.4",
    )
    assert gepa_cost(None, record) == Cost(policy_rollouts=248, llm_calls=7)  # optimised now
    assert gepa_cost(record.model_copy(), record) == Cost()  # the stored prompt reused: spent by an earlier call
    rebudgeted = record.model_copy(update={"max_metric_calls": 128})  # stored at another budget: optimised again now
    assert gepa_cost(rebudgeted, record) == Cost(policy_rollouts=248, llm_calls=7)
