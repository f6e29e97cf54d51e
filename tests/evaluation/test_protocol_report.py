"""The paper's protocol beside the held-out split: `all_tasks:*` evaluations kept apart, and the report's sections for
them and for ToolSandbox's Table 2 metrics (perfect count, mean similarity)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import Message
from gapforge.envs.registry import make_env
from gapforge.evaluation.protocol_report import all_tasks_section, toolsandbox_section
from gapforge.evaluation.registry import labels
from gapforge.evaluation.report import write_report
from gapforge.evaluation.run import EvalPlan, evaluate
from gapforge.store import Store

TASKS = ["shop-refusal-001", "shop-lookup-001"]


class Says:
    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text
        self.temperatures: list[float | None] = []

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        self.temperatures.append(temperature)
        return Message.assistant(self.text)


def test_all_tasks_evaluations_are_stored_apart_and_reported_as_the_papers_protocol(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    run_id = store.create_run("trace", {"env": "shop"})
    env = make_env("shop")
    families = {t: env.task_family(t) for t in TASKS}
    base, other = Says("base-policy", "I cannot help with that."), Says("other-policy", "Sorry.")
    policies = {"base": base, "other": other}
    held = EvalPlan(run_id, "shop", TASKS[:1], trials=2, max_turns=2, temperature=1.0, n_boot=50)
    every = EvalPlan(run_id, "shop", TASKS, trials=1, max_turns=2, temperature=0.0, n_boot=50, scope="all_tasks")
    asyncio.run(evaluate(store, held, make_env=lambda: make_env("shop"), policies=policies, families=families))
    asyncio.run(evaluate(store, every, make_env=lambda: make_env("shop"), policies=policies, families=families))
    rows = {e.name: e.metrics for e in store.evaluations(run_id)}
    assert {"eval:base", "eval:other", "all_tasks:base", "all_tasks:other"} <= set(rows)
    assert (
        rows["eval:base"]["episodes"] == 2
        and rows["all_tasks:base"]["episodes"] == 2
        and rows["all_tasks:base"]["tasks"] == 2
    )
    assert rows["all_tasks:base"]["child_run"] == f"{run_id}.all_tasks.base" != rows["eval:base"]["child_run"]
    assert 0.0 in base.temperatures and 1.0 in base.temperatures  # greedy apart from the held-out split's sampling
    section = "\n".join(all_tasks_section(store, run_id, labels(store, run_id)))
    assert "Every task, greedy, 1 trial (the TRACE paper's protocol)" in section and "not held out" in section
    assert "| base |" in section and "| other |" in section and "2 tasks × 1 trial" in section
    report = write_report(store, run_id, tmp_path / "report").path.read_text()
    assert report.index("## Evaluation on the held-out split") < report.index("## Every task, greedy, 1 trial")
    assert toolsandbox_section(store, run_id, {}) == []  # not a ToolSandbox target
    store.close()


@dataclass
class _Row:
    name: str
    metrics: dict[str, Any]


@dataclass
class _Episode:
    env: str
    task_id: str
    reward: float
    score_info: dict[str, Any] = field(default_factory=dict)


class _Store:
    def __init__(self, rows: list[_Row], episodes: dict[str, list[_Episode]]) -> None:
        self.rows, self.by_run = rows, episodes

    def evaluations(self, run_id: str) -> list[_Row]:
        return self.rows

    def get_evaluation(self, run_id: str, name: str) -> None:
        return None  # no GEPA row

    def episodes(self, run_id: str, env: str | None = None) -> list[_Episode]:
        return [e for e in self.by_run.get(run_id, []) if env is None or e.env == env]


def test_toolsandbox_runs_report_perfect_count_and_mean_similarity() -> None:
    env = "toolsandbox?network=stand-in"
    cats = {"categories": ["single_tool_call"]}
    store = _Store(
        [
            _Row("all_tasks:base", {"env": env, "child_run": "r.all_tasks.base"}),
            _Row("eval:base", {"env": env, "child_run": "r.eval.base"}),
            _Row("all_tasks:trace_routed", {"env": env, "child_run": "r.all_tasks.trace_routed"}),
            _Row("all_tasks:capability_hints", {"env": env, "child_run": "r.all_tasks.capability_hints"}),
        ],
        {
            "r.all_tasks.base": [
                _Episode(env, "a", 1.0, cats),
                _Episode(env, "b", 0.5, cats),
                _Episode(env, "c", 0.0, cats),
            ],
            "r.all_tasks.trace_routed": [
                _Episode(env, "a", 1.0, cats),
                _Episode(env, "b", 1.0, cats),
                _Episode(env, "c", 0.25, cats),
            ],
            "r.all_tasks.capability_hints": [_Episode(env, "a", 1.0, cats)],
            "r.eval.base": [_Episode(env, "a", 1.0, cats), _Episode(env, "a", 0.5, cats)],
        },  # two trials, one imperfect: not perfect
    )
    lines = toolsandbox_section(store, "r", labels(store, "r"))  # every comparison's labels, as the report gives
    text = "\n".join(lines)
    assert "perfect count and mean similarity" in text
    assert "| base | held-out split | 0 of 1 | 0.750 |" in lines
    assert "| base | all tasks, greedy, 1 trial | 1 of 3 | 0.500 |" in lines
    assert "| trace_routed | all tasks, greedy, 1 trial | 2 of 3 | 0.750 |" in lines
    assert (
        "| capability hints (descriptions appended, unoptimised) | all tasks, greedy, 1 trial | 1 of 1 | 1.000 |"
        in lines
    )  # labelled
    assert "not comparable to live RapidAPI runs" in text  # the stand-in network mode says so
