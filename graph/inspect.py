"""Inspection and time travel over a run's checkpoints (the data `gapforge state /
history / fork` render; nothing here prints).

A run is one LangGraph thread whose id is the run id. `fork` copies one past
checkpoint of a run into a new thread (the new run) with the run id replaced;
the caller has copied the parent's stored rows of the stages done by then
(episodes, dictionary, labels and their cache) under the new run id, so the
fork's stages find that work done and redo none of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, copy_checkpoint

from gapforge.faults import InputFault
from gapforge.graph.runner import thread_config

# Forks are allowed while only shared, run-independent work is done (rollouts, analysis):
# from `select` on, a stage writes rows keyed by the run it belongs to.
FORKABLE_NEXT = frozenset({"collect_rollouts", "discover", "label", "select"})


class ForkError(InputFault):
    """The fork cannot be made; the message says what to pick instead."""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    checkpoint_id: str
    step: int
    source: str  # input | loop | update | fork
    node: str  # what produced this checkpoint (the nodes that ran, or "start"/"review decision")
    created_at: str
    changed: list[str]  # short "key: value" lines
    next: tuple[str, ...]
    cost: dict[str, dict[str, float]] = field(default_factory=dict)  # what this step spent, per stage (counters added)


def _short(value: Any, limit: int = 60) -> str:
    if isinstance(value, float):
        text = f"{value:.3g}"
    elif isinstance(value, list):
        text = (
            ", ".join(str(v) for v in value)
            if all(not isinstance(v, (dict, list)) for v in value)
            else f"{len(value)} items"
        )
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={_short(v, 20)}" for k, v in value.items() if not isinstance(v, (dict, list)))
        text = text or ", ".join(str(k) for k in value)  # a map of maps (e.g. evaluation per policy): its keys
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cost_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The cost counters a step added (state `cost` is cumulative per stage)."""
    out: dict[str, dict[str, float]] = {}
    for stage, counters in (after.get("cost") or {}).items():
        old = (before.get("cost") or {}).get(stage) or {}
        added = {k: round(v - old.get(k, 0), 6) for k, v in counters.items() if v != old.get(k, 0)}
        if added:
            out[stage] = added
    return out


def diff_values(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed between two states, one line per top-level key (one level deeper for maps)."""
    lines: list[str] = []
    for key, value in after.items():
        old = before.get(key)
        if value == old or key in ("stage", "cost"):
            continue
        if (
            isinstance(value, dict)
            and isinstance(old, dict | None)
            and key in ("capabilities", "stages", "notes", "cost")
        ):
            for sub, sub_value in value.items():
                if (old or {}).get(sub) != sub_value:
                    lines.append(f"{key}.{sub}: {_short(sub_value)}")
        else:
            lines.append(f"{key}: {_short(value)}")
    return lines


async def history(graph: Any, run_id: str) -> list[HistoryEntry]:
    """The run's checkpoint timeline, oldest first (top-level checkpoints)."""
    snaps = [s async for s in graph.aget_state_history(thread_config(run_id))]
    snaps.reverse()
    out: list[HistoryEntry] = []
    prev_values: dict[str, Any] = {}
    prev_next: tuple[str, ...] = ()
    for snap in snaps:
        meta = snap.metadata or {}
        if meta.get("source") == "input":
            continue  # the empty checkpoint before the input is written
        source = str(meta.get("source", "?"))
        if source == "update":
            node = "review decision" if (snap.values or {}).get("review") != prev_values.get("review") else "update"
        elif source == "fork":
            parent = meta.get("forked_from") or {}
            node = f"fork of {parent.get('run')} @ {parent.get('checkpoint')}"
        else:
            node = ", ".join(sorted(set(prev_next) - {"__start__"})) or "start"
        values = dict(snap.values or {})
        out.append(
            HistoryEntry(
                checkpoint_id=snap.config["configurable"]["checkpoint_id"],
                step=int(meta.get("step", -1)),
                source=source,
                node=node,
                created_at=snap.created_at or "",
                changed=diff_values(prev_values, values),
                next=tuple(snap.next),
                cost=cost_delta(prev_values, values),
            )
        )
        prev_values, prev_next = values, tuple(snap.next)
    return out


async def fork_point(graph: Any, parent_run: str, checkpoint_id: str) -> dict[str, Any]:
    """Check that the run can be forked at this checkpoint; returns the state values there."""
    saver: BaseCheckpointSaver[Any] = graph.checkpointer
    found = await saver.aget_tuple(thread_config(parent_run, checkpoint_id))
    if found is None or found.config["configurable"].get("checkpoint_id") != checkpoint_id:
        raise ForkError(
            f"run {parent_run!r} has no checkpoint {checkpoint_id!r}: list them with `gapforge history {parent_run}`"
        )
    snap = await graph.aget_state(thread_config(parent_run, checkpoint_id))
    if not set(snap.next) <= FORKABLE_NEXT or not snap.next:
        raise ForkError(
            f"checkpoint {checkpoint_id} is at {', '.join(snap.next) or 'the end'}: fork from a checkpoint whose next step is "
            f"{', '.join(sorted(FORKABLE_NEXT))} (stages from select on write rows of their own run)"
        )
    return dict(snap.values)


def shared_work(values: dict[str, Any]) -> list[str]:
    """The kinds of stored work a fork at this state takes over from its parent."""
    stages = values.get("stages") or {}
    shared = []
    if stages.get("collect_rollouts") == "done":
        shared.append("rollouts")
        if stages.get("discover") == "done":
            shared.append("analysis")
    return shared


async def fork(graph: Any, parent_run: str, checkpoint_id: str, new_run: str) -> dict[str, Any]:
    """Copy checkpoint `checkpoint_id` of `parent_run` into a new thread `new_run`; returns the fork's state values."""
    saver: BaseCheckpointSaver[Any] = graph.checkpointer
    await fork_point(graph, parent_run, checkpoint_id)
    found = await saver.aget_tuple(thread_config(parent_run, checkpoint_id))
    if found is None:
        raise ForkError(f"checkpoint {checkpoint_id} of {parent_run!r} vanished while forking")
    if await saver.aget_tuple(thread_config(new_run)) is not None:
        raise ForkError(f"run {new_run!r} already has checkpoints: pick another run id")
    checkpoint = copy_checkpoint(found.checkpoint)
    values = checkpoint["channel_values"]
    values["run_id"] = new_run
    meta = {**(found.metadata or {}), "source": "fork", "forked_from": {"run": parent_run, "checkpoint": checkpoint_id}}
    versions = checkpoint["channel_versions"]
    # The writes stored against this checkpoint are the results of the step that ran after it
    # in the parent; they are NOT copied, so that step runs again, with the fork's settings.
    await saver.aput({"configurable": {"thread_id": new_run, "checkpoint_ns": ""}}, checkpoint, meta, dict(versions))
    return dict(values)
