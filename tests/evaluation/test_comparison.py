"""The demo's comparison: base / GRPO-on-target / each adapter / routed TRACE with paired differences, training
rollouts and wall time, TRACE's budget both ways, and the verdict from the paired TRACE − GRPO-on-target interval."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from gapforge.config import GapforgeConfig, TrainingConfig
from gapforge.evaluation.comparison import comparison

TASKS = {**{f"r{i}": "refusal" for i in range(4)}, **{f"l{i}": "lookup" for i in range(4)}}


@dataclass
class _Store:
    rows: dict[str, list[Any]] = field(default_factory=dict)  # child run -> episodes
    evals: list[Any] = field(default_factory=list)
    adapter_rows: list[Any] = field(default_factory=list)

    def evaluations(self, run_id: str) -> list[Any]:
        return self.evals

    def adapters(self, run_id: str) -> list[Any]:
        return self.adapter_rows

    def synthetic_envs(self, run_id: str) -> list[Any]:
        return [SimpleNamespace(id=1), SimpleNamespace(id=2)]

    def get_validation(self, env_id: int) -> Any:
        return SimpleNamespace(report={"verdict": {"rollouts": 128}})

    def episodes(self, run_id: str, env: str | None = None) -> list[Any]:
        return self.rows[run_id]

    def play(self, name: str, succeed: Any, trials: int = 4, value: float = 0.0) -> None:
        child = f"r.eval.{name}"
        self.rows[child] = [
            SimpleNamespace(
                task_id=t, sample=s, reward=float(succeed(t, s)), success=bool(succeed(t, s)), task_family=f
            )
            for t, f in TASKS.items()
            for s in range(trials + 2)
        ]  # two extra stored trials: not scored
        paired = {"episodes": 32, "pass_rate": {"value": value, "low": value - 0.1, "high": value + 0.1}}
        metrics = {
            "env": "shop",
            "trials": trials,
            "trials_by_family": {},
            "child_run": child,
            "focus_family": "refusal",
            "pass_rate": {"value": 0.5},
            "vs_base_paired": None if name == "base" else paired,
        }
        self.evals.append(SimpleNamespace(name=f"eval:{name}", metrics=metrics))


def _cfg() -> GapforgeConfig:
    return GapforgeConfig(training=TrainingConfig.tiny(max_steps=16, groups_per_step=2, num_generations=8))


def _store(grpo_refusal: bool, kept: int = 12) -> _Store:
    store = _Store(
        adapter_rows=[
            SimpleNamespace(name="policy_refusal", status="done", metrics={"steps": 16, "wall_s": 95.4}),
            SimpleNamespace(
                name="baseline_grpo_target", status="done", metrics={"steps": 16, "wall_s": 120.0, "best_step": kept}
            ),
        ]
    )
    store.play("base", lambda t, s: t.startswith("l"))
    store.play("adapter:policy_refusal", lambda t, s: True, value=0.5)
    store.play("trace_routed", lambda t, s: True, value=0.5)
    store.play(
        "baseline_grpo_target",
        lambda t, s: t.startswith("l") or (grpo_refusal and s % 4 != 0),
        value=0.4 if grpo_refusal else 0.0,
    )
    return store


def test_the_comparison_rows_and_trace_ahead_of_grpo() -> None:
    lines = comparison(_store(grpo_refusal=False), "r", _cfg())
    assert lines[0].endswith("budget 256 training rollouts):")
    rows = {line.split("  ")[1].strip(): line for line in lines[1:5]}
    assert list(rows) == ["base", "GRPO-on-target (equal budget)", "adapter policy_refusal", "TRACE (routed)"]
    assert rows["GRPO-on-target (equal budget)"].endswith("256 training rollouts, 120 s, kept step 12")
    assert rows["TRACE (routed)"].endswith(
        "256 training rollouts, 95 s (512 with synthesis' 256 readiness and self-test rollouts)"
    )
    assert "vs base +50.0 points [+40.0, +60.0] (32 pairs)" in rows["TRACE (routed)"]
    assert (
        lines[5] == "TRACE − GRPO-on-target (all tasks): +50.0 points [+12.5, +87.5], 32 paired episodes: TRACE ahead"
    )
    assert lines[6].startswith("TRACE − GRPO-on-target (refusal): +100.0 points") and lines[6].endswith("TRACE ahead")


def test_a_baseline_that_matches_trace_is_called_tied_and_a_missing_one_is_named() -> None:
    lines = comparison(_store(grpo_refusal=True), "r", _cfg())
    assert lines[-1].startswith("TRACE − GRPO-on-target (refusal): +25.0 points") and lines[-1].endswith(
        "tied (the 95% interval contains 0)"
    )
    store = _store(grpo_refusal=False)
    store.evals = [e for e in store.evals if e.name != "eval:baseline_grpo_target"]
    assert comparison(store, "r", _cfg())[-1].startswith("TRACE vs GRPO-on-target: not compared")


def test_the_budget_comes_from_the_config_stored_with_a_graph_run() -> None:
    store = _store(grpo_refusal=False)
    training = {"max_steps": 16, "groups_per_step": 2, "num_generations": 8}
    store.get_run = lambda run_id: SimpleNamespace(
        config={"command": "demo", "config": {"training": training, "seed": 0}}
    )
    assert comparison(store, "r")[0].endswith("budget 256 training rollouts):")


def test_a_baseline_that_kept_its_step_0_is_said_to_play_as_the_base() -> None:
    lines = comparison(_store(grpo_refusal=False, kept=0), "r", _cfg())
    rows = {line.split("  ")[1].strip(): line for line in lines[1:5]}
    assert rows["GRPO-on-target (equal budget)"].endswith("kept step 0")
    assert lines[5].startswith("GRPO-on-target kept its step 0") and "plays as the base" in lines[5]
    assert not any(
        line.startswith("GRPO-on-target kept") for line in comparison(_store(grpo_refusal=False), "r", _cfg())
    )
