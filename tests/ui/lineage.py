"""Stage services that build a whole run's lineage quickly, for the viewer's tests and bench/ui.py.

`tests/ui/conftest.py drive_lineage` drives the REAL graph (real checkpoints,
history, per-capability branches) over these stages. They write real rows with the store's
writers: honest shop episodes from the planted-deficit policy (the real env, user and
reward), labels from a deterministic analyst, the REAL selection statistics
(agents.analysis.selection: bootstrap CIs, κ, the vote), env attempts and self-test
reports shaped like the validator's, adapters with training's files, evaluation child runs
of planted episodes with the REAL evaluation statistics, and the REAL report. No Docker,
no model. An XSS probe episode sits in the run (tests/ui/lineage_rows.py).

Sizes: `<workspace>/lineage.json` ({"samples", "capabilities", "failing_attempts", "trials",
"steps"}); the defaults make a small run in seconds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gapforge.agents.analysis.schemas import dictionary_hash
from gapforge.agents.analysis.selection import select
from gapforge.agents.analysis.split import analysis_episodes
from gapforge.agents.router import confusion
from gapforge.evaluation import stats
from gapforge.evaluation.run import child_run_id
from gapforge.graph.context import (
    BaselineDone,
    CapabilityStats,
    Cost,
    DiscoveryDone,
    EvaluationDone,
    LabelPassDone,
    ReportDone,
    RolloutsDone,
    RouterDone,
    SelectionDone,
    SynthesisAttempt,
    TrainingDone,
    ValidationDone,
)
from gapforge.store.analysis_records import LabelCallRecord
from tests.fakes.planted_policy import PlantedDeficit, collect_planted
from tests.ui import lineage_rows as rows

DEFAULTS = {"samples": 2, "capabilities": 3, "failing_attempts": 1, "trials": 2, "steps": 12}
PROMPT = ("lineage_fixture", "1")


class LineageStages:
    def __init__(self, cfg: Any, store: Any) -> None:
        self.cfg, self.store = cfg, store
        ws = Path(cfg.workspace)
        spec = ws / "lineage.json"
        self.size = {**DEFAULTS, **(json.loads(spec.read_text()) if spec.is_file() else {})}
        self.ws = ws

    def _dictionary(self, run_id: str) -> tuple[dict[str, str], str]:
        caps = rows.capability_names(self.size["capabilities"])
        return caps, dictionary_hash(list(caps.items()))

    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        n = await asyncio.to_thread(collect_planted, self.store, run_id, samples=self.size["samples"], seed=0)
        self.store.put_episode(
            run_id,
            "shop",
            rows.PROBE_TASK,
            0,
            policy="probe",
            messages=rows.probe_messages(),
            reward=0.0,
            success=False,
            components={"db": 0.0, "communicate": 0.0},
            termination="env_error",
            error="env.step failed: " + rows.PROBE,
            turns=2,
            timings={},
            task_family="probe <b>family</b>",
            score_info={"evaluator": rows.PROBE},
            step_info=[{"turn": 1, "info": {"note": rows.PROBE}}],
        )
        eps = self.store.episode_summaries(run_id)
        return RolloutsDone(len(eps), sum(e.success for e in eps), n + 1, Cost(policy_rollouts=n))

    async def discover(self, run_id: str) -> DiscoveryDone:
        caps, dhash = self._dictionary(run_id)
        for name, definition in caps.items():
            self.store.put_capability(
                run_id,
                name,
                definition=definition,
                example_episode_ids=[1, 2],
                prompt_name=PROMPT[0],
                prompt_version=PROMPT[1],
            )
        self.store.put_discovery(
            run_id,
            dictionary_hash=dhash,
            prompt_name=PROMPT[0],
            prompt_version=PROMPT[1],
            sample_episode_ids=[1, 2],
            details={"calls": 1},
        )
        return DiscoveryDone(list(caps), Cost(llm_calls=1, prompt_tokens=2000, completion_tokens=300))

    def _label_pass(self, run_id: str, pass_index: int) -> int:
        caps, dhash = self._dictionary(run_id)
        a = self.cfg.analysis
        eps = analysis_episodes(self.store, run_id, fraction=a.split_fraction, seed=a.seed)
        probe = [e for e in self.store.episode_summaries(run_id) if e.task_id == rows.PROBE_TASK]
        records = [
            LabelCallRecord(
                e.id,
                pass_index,
                dhash,
                *PROMPT,
                status="ok",
                labels=[(c, *rows.label_of(c, e, pass_index)) for c in caps],
            )
            for e in eps
        ]
        records += [
            LabelCallRecord(
                e.id, pass_index, dhash, *PROMPT, status="ok", labels=[(c, "LACKING", rows.PROBE) for c in caps]
            )
            for e in probe
        ]
        for k in range(0, len(records), 500):
            self.store.put_label_calls(run_id, records[k : k + 500])
        return len(records)

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone:
        n = await asyncio.to_thread(self._label_pass, run_id, pass_index)
        return LabelPassDone(pass_index, n, cost=Cost(llm_calls=n, prompt_tokens=900 * n, completion_tokens=60 * n))

    async def select(self, run_id: str) -> SelectionDone:
        result = await asyncio.to_thread(select, self.store, run_id, cfg=self.cfg.analysis)
        stats_ = {
            s.capability: CapabilityStats(s.gap, s.coverage, s.kept_passes, s.retained) for s in result.statistics
        }
        return SelectionDone(list(result.retained), stats_)

    async def synthesize(self, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
        row = self.store.put_synthetic_env(
            run_id,
            capability,
            attempt,
            code=rows.env_code(capability, attempt),
            status="written",
            prompt_name="synthesis_generator",
            prompt_version="3",
        )
        return SynthesisAttempt(capability, attempt, row.id, cost=Cost(llm_calls=1))

    async def validate(self, run_id: str, capability: str, attempt: int) -> ValidationDone:
        env = next(e for e in self.store.synthetic_envs(run_id, capability) if e.attempt == attempt)
        passed = attempt > self.size["failing_attempts"]
        self.store.put_validation(env.id, report=rows.validation_report(capability, attempt, passed), passed=passed)
        self.store.set_synthetic_env_status(env.id, "accepted" if passed else "failed")
        return ValidationDone(capability, attempt, passed, "passed" if passed else "failed: result_format, grpo_ready")

    async def train(self, run_id: str, capability: str) -> TrainingDone:
        steps = self.size["steps"]
        best = 0 if capability == "precondition_verification" else steps - steps % 4
        path, metrics = rows.adapter_files(
            self.ws / "adapters" / run_id / capability, capability, steps=steps, best_step=best
        )
        self.store.put_adapter(run_id, capability, path=path, metrics=metrics, status="done", capability=capability)
        return TrainingDone(
            capability,
            capability,
            True,
            metrics["heldout_before"],
            metrics["heldout_after"],
            kept_step=best,
            cost=Cost(policy_rollouts=16 * steps),
        )

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone:
        labels = [*capabilities, "none"]
        cases = [
            {
                "source": f"synthetic:{c}:seed={s}",
                "expected": c,
                "decision": rows.routing_decision(f"{c}:{s}", capabilities),
            }
            for c in capabilities
            for s in range(4)
        ]
        conf = confusion([(c["expected"], c["decision"]["capability"] or "none") for c in cases], labels)
        self.store.put_evaluation(
            run_id,
            "router_accuracy",
            policy="router",
            metrics={
                "accuracy": conf["accuracy"],
                "labels": labels,
                "matrix": conf["matrix"],
                "abstained": 0,
                "cases": cases,
                "prompt": "router@1",
                "margin": 0.0,
            },
        )
        return RouterDone(capabilities, {"accuracy": conf["accuracy"], "cases": len(cases), "abstained": 0})

    async def train_baseline(self, run_id: str) -> BaselineDone:
        return BaselineDone(None, skipped="off (not in evaluation.comparisons)")

    def _evaluate(self, run_id: str, capabilities: list[str]) -> dict[str, dict[str, float]]:
        split = self.store.get_split(run_id)
        tasks, families, trials = list(split.heldout_tasks), dict(split.families), self.size["trials"]
        policies = {
            "base": PlantedDeficit(),
            "trace_routed": PlantedDeficit(refusal_skip=0.35),
            **{f"adapter:{c}": PlantedDeficit(refusal_skip=0.55) for c in capabilities},
        }
        played: dict[str, Any] = {}
        for name, deficit in policies.items():
            child = child_run_id(run_id, name)
            self.store.create_run(
                "evaluation",
                {"parent": run_id, "policy": name, "tasks": tasks, "trials": trials},
                run_id=child,
                exist_ok=True,
            )
            collect_planted(
                self.store, child, task_ids=tasks, samples=trials, seed=0, deficit=deficit
            )  # same draws: paired
            played[name] = {}
            for r in self.store.episode_summaries(child):
                played[name].setdefault(r.task_id, {})[r.sample] = (r.reward, r.success)
        results = {}
        for name in policies:
            trials_ = stats.as_trials(played[name])
            base = played["base"]
            boot = {"n_boot": 200, "seed": 0}
            metrics: dict[str, Any] = {
                "env": "shop",
                "trials": trials,
                "focus_family": "policy_refusal",
                "child_run": child_run_id(run_id, name),
                **stats.summarize(trials_, **boot),
                "by_family": stats.by_family(trials_, families, **boot),
                "vs_base": None if name == "base" else stats.paired_difference(trials_, stats.as_trials(base), **boot),
                "vs_base_paired": None if name == "base" else stats.paired_episodes(played[name], base, **boot),
                "vs_base_by_family": None
                if name == "base"
                else stats.paired_by_family(played[name], base, families, **boot),
            }
            if name == "trace_routed":
                metrics["routing"] = {t: rows.routing_decision(t, capabilities) for t in tasks}
            self.store.put_evaluation(run_id, f"eval:{name}", policy=name, metrics=metrics)
            results[name] = {"pass_rate": metrics["pass_rate"]["value"], "n": metrics["episodes"]}
        return results

    async def evaluate(self, run_id: str, capabilities: list[str]) -> EvaluationDone:
        results = await asyncio.to_thread(self._evaluate, run_id, capabilities)
        return EvaluationDone(results, Cost(policy_rollouts=sum(int(r["n"]) for r in results.values())))

    async def report(self, run_id: str, values: dict | None = None) -> ReportDone:
        from gapforge.evaluation.report import write_report

        done = await asyncio.to_thread(write_report, self.store, run_id, self.ws / "reports" / run_id)
        return ReportDone(str(done.path))


@asynccontextmanager
async def open_stages(cfg: Any, store: Any, progress: Any = None) -> AsyncIterator[LineageStages]:
    yield LineageStages(cfg, store)
