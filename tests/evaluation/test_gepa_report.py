"""The report names the prompt baselines for what they are: the paired table labels GEPA with the metric calls it
spent and the capability hints as unoptimised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapforge.evaluation.gepa_baseline import GEPA_ROW, GepaRecord
from gapforge.evaluation.report import write_report
from tests.evaluation.test_summary_report import _metrics, _paired, _Row, _Store


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


def test_the_evaluation_stage_reuses_the_runs_prompt_at_its_budget_and_counts_nothing_for_it(tmp_path: Path) -> None:
    import asyncio
    from types import SimpleNamespace

    from gapforge.agents.prompted_policy import hints_text
    from gapforge.evaluation.comparisons import Evaluation
    from gapforge.evaluation.config import EvaluationConfig
    from gapforge.evaluation.gepa_baseline import GEPA_COMPARISON, save_gepa
    from gapforge.store import Store

    caps = [{"name": "pv", "definition": "checks first", "example": "", "adapter": "pv"}]
    record = GepaRecord(
        prompt="p",
        seed_prompt=hints_text(caps)[0],
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
    lines: list[str] = []
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store.create_run("trace", {})
        save_gepa(store, run, record)
        ev = Evaluation(
            store,
            run,
            SimpleNamespace(evaluation=EvaluationConfig(gepa_max_metric_calls=256)),
            "shop",
            lambda: None,
            ["t"],
            {"t": "f"},
            SimpleNamespace(env="shop"),
            SimpleNamespace(capabilities=caps, adapter_paths={"pv": tmp_path}),
            None,
            None,
            "",
            given=False,
            progress=lines.append,
            play=None,  # type: ignore[arg-type]
        )
        assert asyncio.run(GEPA_COMPARISON.prepare(ev)) == record  # stored at this budget from this seed: reused
    assert (ev.policy_rollouts, ev.llm_calls) == (0, 0)  # spent by the call that optimised it
    assert lines == ["gepa: 248 of 256 metric calls, analysis-split reward 0.20 -> 0.30"]
