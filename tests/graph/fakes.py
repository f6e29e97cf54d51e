"""Small fake stage services for the graph machinery tests (they write real store rows).

Deterministic data: 10 shop-like tasks, even ones succeed. Three candidate
capabilities with known statistics: `alpha` (gap 1.0, coverage 1.0), `beta`
(gap 0.4, coverage 0.6), `gamma` (gap 0.0: a decoy). `beta`'s first generated
env fails validation, the second passes.

Control files in the workspace (tests only):
- `calls.log`: one line per unit of work done (`rollout T`, `label P E`, ...) —
  the tests count new policy rollouts / labeling calls from it;
- `hold`: `stage` or `stage:key`; on reaching it (after writing part of its rows)
  the fake touches `reached` and sleeps, so a test can kill -9 the process there;
- `fail_train`: capability names whose training raises (a crash of one job);
- `endpoint_down`: the analyst endpoint is down (discover raises ModelEndpointError);
- `sandbox_down`: capability names whose synthesis loses its sandbox for good (agents.infra.stop).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agents.errors import ModelEndpointError
from graph.context import (
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
from store import LabelIn

TASKS = [f"task-{i}" for i in range(10)]
DICTIONARY = {"alpha": "checks preconditions", "beta": "reads data carefully", "gamma": "greets the user"}
# which failed/succeeded task indexes lack each capability (PRESENT otherwise)
LACKING = {"alpha": {1, 3, 5, 7, 9}, "beta": {1, 3, 5, 0}, "gamma": {1, 0}}


class FakeStages:
    def __init__(self, cfg: Any, store: Any) -> None:
        self.cfg = cfg
        self.store = store
        self.ws = Path(cfg.workspace)

    # --- test controls -------------------------------------------------------------------------
    def _log(self, line: str) -> None:
        with open(self.ws / "calls.log", "a") as fh:
            fh.write(line + "\n")

    async def _maybe_hold(self, where: str) -> None:
        hold = self.ws / "hold"
        if hold.is_file() and hold.read_text().strip() == where:
            (self.ws / "reached").write_text(where)
            await asyncio.sleep(3600)

    # --- stages --------------------------------------------------------------------------------
    async def collect_rollouts(self, run_id: str) -> RolloutsDone:
        have = self.store.episode_keys(run_id, "shop")
        ran = 0
        for i, task in enumerate(TASKS):
            if i == 5:
                await self._maybe_hold("collect_rollouts")
            if (task, 0) in have:
                continue
            self.store.put_episode(
                run_id, "shop", task, 0, policy="fake", messages=[], reward=float(i % 2 == 0), success=i % 2 == 0,
                components={}, termination="done", error=None, turns=1, timings={},
            )
            self._log(f"rollout {task}")
            ran += 1
        eps = self.store.episodes(run_id, "shop")
        return RolloutsDone(len(eps), sum(e.success for e in eps), ran, Cost(policy_rollouts=ran))

    async def discover(self, run_id: str) -> DiscoveryDone:
        if (self.ws / "endpoint_down").is_file():
            raise ModelEndpointError("the LLM endpoint http://127.0.0.1:9/v1 kept failing (connection refused) after 4 retries")
        target = run_id
        for name, definition in DICTIONARY.items():
            self.store.put_capability(target, name, definition=definition)
        self._log("discover")
        return DiscoveryDone(list(DICTIONARY), Cost(llm_calls=1))

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone:
        target = run_id
        done = {lab.episode_id for lab in self.store.labels(target, pass_index)}
        calls = 0
        for n, ep in enumerate(self.store.episodes(run_id, "shop")):
            if n == 5:
                await self._maybe_hold(f"label:{pass_index}")
            if ep.id in done:
                continue
            idx = int(ep.task_id.split("-")[1])
            labels = [LabelIn(ep.id, c, "LACKING" if idx in LACKING[c] else "PRESENT") for c in DICTIONARY]
            self.store.put_labels(target, pass_index, labels)
            self._log(f"label {pass_index} {ep.id}")
            calls += 1
        return LabelPassDone(pass_index, calls, cost=Cost(llm_calls=calls))

    async def select(self, run_id: str) -> SelectionDone:
        src = run_id
        delta, rho = self.cfg.analysis.delta, self.cfg.analysis.rho
        success = {e.id: e.success for e in self.store.episodes(run_id, "shop")}
        stats: dict[str, CapabilityStats] = {}
        for cap in self.store.capabilities(src):
            kept_passes, last = 0, (None, 0.0)
            passes = sorted({lab.pass_index for lab in self.store.labels(src, capability=cap.name)})
            for p in passes:
                labs = self.store.labels(src, p, cap.name)
                fails = [lab for lab in labs if not success[lab.episode_id]]
                wins = [lab for lab in labs if success[lab.episode_id]]
                er_minus = sum(lab.value == "LACKING" for lab in fails) / len(fails)
                er_plus = sum(lab.value == "LACKING" for lab in wins) / len(wins)
                gap, cov = er_minus - er_plus, sum(lab.value == "LACKING" for lab in fails) / len(fails)
                kept = gap >= delta and cov >= rho
                kept_passes += kept
                self.store.put_capability_stat(run_id, cap.name, p, er_plus=er_plus, er_minus=er_minus, gap=gap, coverage=cov, kept=kept)
                last = (gap, cov)
            retained = kept_passes >= self.cfg.analysis.min_passes
            self.store.set_capability_retained(run_id, cap.name, retained)
            stats[cap.name] = CapabilityStats(round(last[0], 3), round(last[1], 3), kept_passes, retained)
        self._log("select")
        return SelectionDone([c for c, s in stats.items() if s.retained], stats)

    async def synthesize(self, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
        await self._maybe_hold(f"synthesize:{capability}:{attempt}")
        down = self.ws / "sandbox_down"
        if down.is_file() and capability in down.read_text().split():
            from agents.infra import stop
            from sandbox.errors import SandboxLost

            raise stop(f"synthesis of {capability}", SandboxLost("killed", "container killed from outside"), "nothing of this attempt is stored")
        row = self.store.put_synthetic_env(run_id, capability, attempt, code=f"# {capability} v{attempt}\n", status="written")
        self._log(f"synthesize {capability} {attempt}")
        return SynthesisAttempt(capability, attempt, row.id, cost=Cost(llm_calls=1))

    async def validate(self, run_id: str, capability: str, attempt: int) -> ValidationDone:
        env = next(e for e in self.store.synthetic_envs(run_id, capability) if e.attempt == attempt)
        passed = not (capability == "beta" and attempt == 1) and capability != "gamma"
        verdict = "passed" if passed else "not trivial: do-nothing scores 0.8 on seed 3"
        self.store.put_validation(env.id, report={"verdict": verdict}, passed=passed)
        self.store.set_synthetic_env_status(env.id, "accepted" if passed else "rejected")
        self._log(f"validate {capability} {attempt}")
        return ValidationDone(capability, attempt, passed, verdict)

    async def train(self, run_id: str, capability: str) -> TrainingDone:
        await self._maybe_hold(f"train:{capability}")
        fail = self.ws / "fail_train"
        if fail.is_file() and capability in fail.read_text().split():
            raise RuntimeError(f"trainer process for {capability} exited with code -9 (out of memory)")
        path = self.ws / "adapters" / capability
        path.mkdir(parents=True, exist_ok=True)
        self.store.put_adapter(run_id, f"{capability}-lora", path=str(path), metrics={"heldout": [0.2, 0.7]}, status="trained", capability=capability)
        self._log(f"train {capability}")
        return TrainingDone(capability, f"{capability}-lora", True, 0.2, 0.7, kept_step=4, cost=Cost(policy_rollouts=16, cpu_s=1.0))

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone:
        self._log("build_router")
        return RouterDone(sorted(capabilities), {"accuracy": 1.0})

    async def evaluate(self, run_id: str, capabilities: list[str]) -> EvaluationDone:
        base = self.store.put_evaluation(run_id, "base", policy="fake", metrics={"pass_rate": 0.5, "n": 10})
        await self._maybe_hold("evaluate")
        rate = 0.5 + 0.1 * len(capabilities)
        self.store.put_evaluation(run_id, "trace_routed", policy="router", metrics={"pass_rate": rate, "n": 10})
        self._log("evaluate")
        return EvaluationDone({"base": dict(base.metrics), "trace_routed": {"pass_rate": rate, "n": 10}}, Cost(policy_rollouts=20))

    async def report(self, run_id: str) -> ReportDone:
        path = self.ws / "reports" / f"{run_id}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {run_id}\n")
        return ReportDone(str(path))


@asynccontextmanager
async def open_stages(cfg: Any, store: Any, progress: Any = None) -> AsyncIterator[FakeStages]:
    yield FakeStages(cfg, store)


def row_counts(store: Any, run_id: str) -> dict[str, int]:
    """Rows per table for one run (what a resumed run must match)."""
    envs = store.synthetic_envs(run_id)
    return {
        "episodes": len(store.episodes(run_id)),
        "capabilities": len(store.capabilities(run_id)),
        "labels": len(store.labels(run_id)),
        "capability_stats": len(store.capability_stats(run_id)),
        "synthetic_envs": len(envs),
        "validations": sum(store.get_validation(e.id) is not None for e in envs),
        "adapters": len(store.adapters(run_id)),
        "evaluations": len(store.evaluations(run_id)),
    }
