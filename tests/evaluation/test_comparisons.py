"""Comparisons as plug-ins (evaluation/comparisons.py): the registry's order is the order the evaluation adds their
policies, the report writes their sections and the demo prints their lines; each one's switch in `evaluation:` turns
its work on; a prepared GEPA prompt is played only where it was prepared; GEPA refuses an env without the run's
analysis split with the stage's own failure; nothing stored gives no section and no line."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gapforge.evaluation.comparisons import CAPABILITY_HINTS, Evaluation
from gapforge.evaluation.config import EvaluationConfig
from gapforge.evaluation.gepa_baseline import GEPA, GEPA_COMPARISON, GepaRecord
from gapforge.evaluation.policies import GRPO_TARGET, standard_policies
from gapforge.evaluation.registry import enabled, registry, report_sections, summary_lines
from gapforge.store import Store

CAPS = [{"name": "pv", "definition": "checks first", "example": "", "adapter": "pv"}]


class _Backend:
    def __init__(self, adapters: list[str]) -> None:
        self.adapters = adapters

    def policy(self, adapter: str | None, *, temperature: float = 1.0, name: str | None = None) -> Any:
        return SimpleNamespace(adapter=adapter, name=name, temperature=temperature)


def _record() -> GepaRecord:
    return GepaRecord(
        prompt="Check the order first.",
        seed_prompt="s",
        prompt_id="gepa@x",
        metric_calls=8,
        max_metric_calls=8,
        tasks=["t"],
        candidates=2,
        seed_score=0.1,
        best_score=0.2,
        reflection_prompt="r@1",
        reflection_calls=1,
        gepa_version="0",
    )


def test_the_registry_names_each_comparison_once_and_its_order_is_the_policies_order() -> None:
    names = [c.name for c in registry()]
    assert len(names) == len(set(names)) and all(names)
    assert {c.kind for c in registry()} == {"baseline", "analysis"}
    backend = _Backend(["pv", GRPO_TARGET])
    policies = standard_policies(backend, None, CAPS, temperature=0.5, prepared={GEPA: _record()})  # type: ignore[arg-type]
    assert list(policies) == ["base", "trace_routed", "adapter:pv", CAPABILITY_HINTS, GEPA, GRPO_TARGET]
    assert policies[GRPO_TARGET].adapter == GRPO_TARGET and policies[GRPO_TARGET].temperature == 0.5
    assert policies[GEPA].addition == "Check the order first."  # the base under the prepared prompt
    # without a prepared prompt and without the baseline's adapter, neither baseline plays (the hints always do)
    bare = standard_policies(_Backend(["pv"]), None, CAPS, temperature=1.0)  # type: ignore[arg-type]
    assert list(bare) == ["base", "trace_routed", "adapter:pv", CAPABILITY_HINTS]


def test_each_switch_turns_its_comparison_on() -> None:
    default = {c.name for c in enabled(SimpleNamespace(evaluation=EvaluationConfig()))}
    assert default == {CAPABILITY_HINTS, "oracle", GRPO_TARGET, "adapter_subsets"}
    every = EvaluationConfig(comparisons=["gepa", "rollout_scaling", "paper_protocol"])
    assert {c.name for c in enabled(SimpleNamespace(evaluation=every))} == {
        CAPABILITY_HINTS,
        GEPA,
        "oracle",
        "rollout_scaling",
        "paper_protocol",
        "adapter_subsets",
    }


class _Failed(Exception):
    pass


def test_gepa_refuses_an_env_without_the_runs_analysis_split_with_the_stages_failure() -> None:
    async def play(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("not played")

    ev = Evaluation(
        store=None,
        run_id="r",
        cfg=None,
        env="shop",
        make_env=lambda: None,
        tasks=["t"],
        families={"t": "f"},
        split=SimpleNamespace(env="other"),
        artifacts=None,
        backend=None,
        router=None,
        base_dir="",
        given=True,
        progress=lambda line: None,
        play=play,
        failure=_Failed,
    )
    with pytest.raises(_Failed, match="the gepa comparison optimises on the run's analysis split"):
        asyncio.run(GEPA_COMPARISON.prepare(ev))


def test_a_run_with_nothing_evaluated_has_no_comparison_section_and_no_line(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store.create_run("demo", {})
        assert report_sections(store, run, tmp_path) == ([], [])
        assert summary_lines(store, run, None, "analysis") == summary_lines(store, run, None, "baseline") == []
