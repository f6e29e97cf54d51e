"""The per-capability branch: synthesize ⇄ validate → train, one subgraph per `Send`.

This is the one repair loop: `synthesize` has the generator write attempt N (the stage
reads attempt N-1's stored feedback), `validate` runs attempt N's self-test; a failed
verdict goes back to `synthesize` until `max_attempts`. The stage services do one step
of one attempt each and never loop themselves.

`gapforge synthesize RUN` runs this same subgraph compiled with `training=False` (`repair`: its
`train` node stops at the accepted env), so the standalone command and the graph share one loop.

Running the branch as a subgraph keeps the fan-in honest: the parent's
`build_router` starts only when every capability's branch has ended, however
many repair attempts each one needed. A failure inside one branch (a sandbox
error, a training crash, a generator that never passes) is recorded in that
capability's row and ends only that branch; the others go on. An error whose class
says `infrastructure = True` (gapforge/faults.py: an endpoint or the sandbox down past
its retries, a full disk) is not the capability's failure: it ends the run (resumable),
nothing is recorded.
"""

from __future__ import annotations

import errno
from typing import Annotated, Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from gapforge.faults import GapforgeError
from gapforge.graph.context import GraphContext, Stages
from gapforge.graph.nodes import call_stage
from gapforge.graph.state import (
    FAILED,
    TRAINED,
    UNSYNTHESIZED,
    CapabilityBranch,
    CapabilityState,
    CapabilityTask,
    add_costs,
    merge_dicts,
)


class CapabilityOutput(TypedDict):
    """What a branch hands back to the parent (reducers merge the parallel branches)."""

    capabilities: Annotated[dict[str, CapabilityState], merge_dicts]
    cost: Annotated[dict[str, dict[str, float]], add_costs]
    capability_cost: Annotated[dict[str, dict[str, float]], add_costs]


def _row(state: CapabilityBranch, **fields: Any) -> dict[str, Any]:
    return {"capabilities": {state["capability"]: fields}}


def _failure(stage: str, err: BaseException) -> str:
    return f"{stage}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")


def _disk_full(err: BaseException) -> bool:
    """A raw OSError of a full disk or quota (a stage writing a file): the machine's, not the capability's."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


async def _guarded(state: CapabilityBranch, stage: str, fn: Any, *args: Any) -> tuple[Any, dict[str, Any]]:
    """call_stage, but any error of this one capability is recorded instead of ending the run."""
    try:
        result, update = await call_stage(stage, fn, *args)
    except Exception as e:  # noqa: BLE001 — recorded per capability (with its type); the other branches go on
        if (isinstance(e, GapforgeError) and e.infrastructure) or _disk_full(e):
            raise  # the infrastructure's doing, not this capability's: the run stops and a resume redoes it
        return None, _row(state, status=FAILED, error=_failure(stage, e))
    update.pop("stage", None)
    if update.get("cost"):  # this capability's own share of the stage's counters (gapforge.pricing)
        update["capability_cost"] = {state["capability"]: update["cost"][stage]}
    if result is None:  # StageFailed
        note = update.pop("notes")[stage]
        update.pop("stages")
        return None, {**update, **_row(state, status=FAILED, error=f"{stage}: {note}")}
    update.pop("stages", None)
    return result, update


async def synthesize(
    state: CapabilityBranch, runtime: Runtime[GraphContext]
) -> Command[Literal["validate", "synthesize", "__end__"]]:
    attempt = int(state.get("attempt") or 0) + 1
    cap = state["capability"]
    done, update = await _guarded(state, "synthesize", runtime.context.stages.synthesize, state["run_id"], cap, attempt)
    update["attempt"] = attempt
    if done is None:
        return Command(goto=END, update=update)
    if done.env_id is None:  # the generator wrote nothing the sandbox can load: that attempt failed
        verdict = done.note or "generator produced no loadable module"
        if attempt >= runtime.context.max_attempts:
            update |= _row(state, status=UNSYNTHESIZED, attempts=attempt, verdict=verdict)
            return Command(goto=END, update=update)
        update |= _row(state, status="synthesizing", attempts=attempt, verdict=verdict)
        return Command(goto="synthesize", update=update)
    update |= _row(state, status="synthesizing", attempts=attempt, env_id=done.env_id)
    return Command(goto="validate", update=update)


async def validate(
    state: CapabilityBranch, runtime: Runtime[GraphContext]
) -> Command[Literal["synthesize", "train", "__end__"]]:
    attempt = int(state["attempt"])
    cap = state["capability"]
    done, update = await _guarded(state, "validate", runtime.context.stages.validate, state["run_id"], cap, attempt)
    if done is None:
        return Command(goto=END, update=update)
    if done.passed:
        update |= _row(state, status="validated", verdict=done.verdict)
        return Command(goto="train", update={**update, "passed": True})
    if attempt >= runtime.context.max_attempts:
        update |= _row(state, status=UNSYNTHESIZED, verdict=done.verdict, env_id=None)
        return Command(goto=END, update=update)
    update |= _row(state, verdict=done.verdict)
    return Command(goto="synthesize", update=update)


async def train(state: CapabilityBranch, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    cap = state["capability"]
    done, update = await _guarded(state, "train", runtime.context.stages.train, state["run_id"], cap)
    if done is None:
        return update
    fields: dict[str, Any] = {
        "status": TRAINED if done.trained else FAILED,
        "adapter": done.adapter,
        "heldout_before": done.heldout_before,
        "heldout_after": done.heldout_after,
        "kept_step": done.kept_step,
    }
    if done.error:
        fields["error"] = f"train: {done.error}"
    return {**update, **_row(state, **fields)}


async def stop_before_training(state: CapabilityBranch, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    """`gapforge synthesize`'s branch ends with the validated env: training is `gapforge train`'s."""
    return {}


def build_capability_graph(*, training: bool = True) -> Any:
    """The subgraph (compiled without its own checkpointer: it inherits the run's). `training=False`: the same repair
    loop ending at the accepted env, run by `repair`."""
    builder = StateGraph(
        CapabilityBranch, context_schema=GraphContext, input_schema=CapabilityTask, output_schema=CapabilityOutput
    )
    builder.add_node("synthesize", synthesize)
    builder.add_node("validate", validate)
    builder.add_node("train", train if training else stop_before_training)
    builder.add_edge(START, "synthesize")
    builder.add_edge("train", END)
    return builder.compile()


async def repair(stages: Stages, run_id: str, capability: str, *, max_attempts: int) -> CapabilityState:
    """The repair loop on its own for one capability (`gapforge synthesize RUN`): the subgraph above without training,
    without a checkpointer (the stages' stored attempts and verdicts make it resumable); of `stages` it calls only
    `synthesize` and `validate`. Returns the capability's row: `status` validated | unsynthesized | failed, with `verdict` / `error`."""
    graph = build_capability_graph(training=False)
    out = await graph.ainvoke(
        CapabilityTask(run_id=run_id, capability=capability),
        context=GraphContext(stages, max_attempts=max_attempts),
    )
    return out["capabilities"][capability]
