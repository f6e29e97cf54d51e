"""Thin async nodes: each reads the state, calls ONE stage service, returns a small update.

The stage services come from the runtime context (`graph.context.GraphContext`);
a node never builds one. Routing that depends on settings (R labeling passes,
N generator attempts, review on/off) is returned as `Command(goto=...)` so the
edges are visible in the return types. A stage that cannot work on this run's
data is recorded as such (state `stages[stage] = "failed"` + a note) and the
stages that depend on its output record "skipped": nothing is invented.
"""

from __future__ import annotations

import resource
import time
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send, interrupt

from gapforge.graph.context import GraphContext, StageFailed
from gapforge.graph.state import DONE, FAILED, SKIPPED, RunState


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (training jobs run as children)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


async def call_stage(stage: str, fn: Any, *args: Any) -> tuple[Any, dict[str, Any]]:
    """Run one stage service; return (result or None, the bookkeeping part of the update).

    Cost: what the service reports, plus wall time; CPU seconds are measured here when
    the service does not report them (process + children; concurrent capability
    branches overlap, so their CPU shares are approximate).
    """
    start, cpu_start = time.perf_counter(), cpu_seconds()
    try:
        result = await fn(*args)
    except StageFailed as e:
        return None, {"stage": stage, "stages": {stage: FAILED}, "notes": {stage: str(e)}}
    counters = result.cost.as_counters(time.perf_counter() - start)
    counters.setdefault("cpu_s", round(cpu_seconds() - cpu_start, 3))
    return result, {"stage": stage, "stages": {stage: DONE}, "cost": {stage: counters}}


def skipped(stage: str, why: str) -> dict[str, Any]:
    return {"stage": stage, "stages": {stage: SKIPPED}, "notes": {stage: why}}


async def collect_rollouts(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    done, update = await call_stage("collect_rollouts", runtime.context.stages.collect_rollouts, state["run_id"])
    if done is not None:
        rate = done.successes / done.episodes if done.episodes else None
        update["rollouts"] = {
            "episodes": done.episodes,
            "successes": done.successes,
            "pass_rate": rate,
            "ran": done.ran,
        }
    return update


async def discover(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    if not (state.get("rollouts") or {}).get("episodes"):
        return skipped("discover", "no episodes to analyse")
    done, update = await call_stage("discover", runtime.context.stages.discover, state["run_id"])
    if done is not None:
        update["dictionary"] = list(done.capabilities)
    return update


async def label(state: RunState, runtime: Runtime[GraphContext]) -> Command[Literal["label", "select"]]:
    """One labeling pass per execution; loops until R passes are stored (a checkpoint after each)."""
    if not state.get("dictionary"):
        return Command(goto="select", update=skipped("label", "no capability dictionary"))
    passes = list(state.get("label_passes") or [])
    pass_index = len(passes)
    done, update = await call_stage("label", runtime.context.stages.label, state["run_id"], pass_index)
    if done is None:
        return Command(goto="select", update=update)
    passes.append(pass_index)
    update["label_passes"] = passes
    if len(passes) < runtime.context.repeats:
        update["stages"] = {"label": f"{len(passes)}/{runtime.context.repeats}"}
        return Command(goto="label", update=update)
    return Command(goto="select", update=update)


async def select(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    if (state.get("stages") or {}).get("label") != DONE:
        return {**skipped("select", "labeling did not complete"), "retained": []}
    done, update = await call_stage("select", runtime.context.stages.select, state["run_id"])
    if done is None:
        update["retained"] = []
        return update
    update["retained"] = list(done.retained)
    update["capabilities"] = {
        name: {
            "status": "retained" if s.retained else s.left_out or "rejected",
            "gap": s.gap,
            "coverage": s.coverage,
            "kept_passes": s.kept_passes,
        }
        for name, s in done.stats.items()
    }
    return update


async def review(state: RunState, runtime: Runtime[GraphContext]) -> Command[Literal["capability", "build_router"]]:
    """Optional human review of the retained list, then one `Send` per capability.

    With review on and no decision in the state yet, the run pauses here
    (`interrupt`); `gapforge review RUN` writes the decision into the state and
    `gapforge run --resume RUN` re-enters this node, which then finds it.
    """
    retained = list(state.get("retained") or [])
    update: dict[str, Any] = {"stage": "review"}
    decision = state.get("review")
    if runtime.context.review and retained and decision is None:
        decision = interrupt({"retained": retained, "capabilities": state.get("capabilities") or {}})
    if decision is not None:
        approved = list(decision["retained"])
        update["review"] = decision
        update["stages"] = {"review": DONE}
        update["capabilities"] = {c: {"status": "dropped"} for c in retained if c not in approved}
        update["capabilities"] |= {c: {"status": "retained"} for c in approved}
        retained = approved
        update["retained"] = retained
    else:
        update["stages"] = {"review": SKIPPED}
    if not retained:
        return Command(goto="build_router", update=update)
    sends = [Send("capability", {"run_id": state["run_id"], "capability": c}) for c in retained]
    return Command(goto=sends, update=update)


async def build_router(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    trained = [c for c, s in (state.get("capabilities") or {}).items() if s.get("status") == "trained"]
    if not trained:
        return skipped("build_router", "no trained adapter to route to")
    done, update = await call_stage("build_router", runtime.context.stages.build_router, state["run_id"], trained)
    if done is not None:
        update["router"] = {"capabilities": list(done.capabilities), **done.summary}
    return update


async def train_baseline(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    """The GRPO-on-target baseline, trained with the capability adapters' rollout budget (before the evaluation plays it)."""
    done, update = await call_stage("train_baseline", runtime.context.stages.train_baseline, state["run_id"])
    if done is None:
        return update
    if done.adapter is None:
        status, note = (SKIPPED, done.skipped) if done.skipped else (FAILED, done.error or "not trained")
        return {**update, "stages": {"train_baseline": status}, "notes": {"train_baseline": note}}
    update["baseline"] = {"adapter": done.adapter, "steps": done.steps}
    return update


async def evaluate(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    if not (state.get("rollouts") or {}).get("episodes"):
        return skipped("evaluate", "no rollouts: nothing to compare against")
    routed = list((state.get("router") or {}).get("capabilities") or [])
    done, update = await call_stage("evaluate", runtime.context.stages.evaluate, state["run_id"], routed)
    if done is not None:
        update["evaluation"] = {name: dict(metrics) for name, metrics in done.results.items()}
    return update


async def report(state: RunState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    done, update = await call_stage("report", runtime.context.stages.report, state["run_id"], dict(state))
    if done is not None:
        update["report"] = done.path
    return update
