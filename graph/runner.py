"""Driving a run: start, resume, and the stream of progress events.

`drive` streams node updates (including those inside each capability's
subgraph) with durability "sync" — every checkpoint is written before the next
step starts, so a kill -9 at any point loses at most the step in flight, and
`drive(..., start=None)` continues from the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gapforge.graph.context import GraphContext

RECURSION_LIMIT = 500  # supersteps: R labeling passes + N attempts x 2 per capability stay far below


@dataclass(frozen=True, slots=True)
class Event:
    """One node finished: `capability` is set for nodes inside a capability branch."""

    node: str
    update: dict[str, Any]
    capability: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Literal["done", "paused"]
    values: dict[str, Any]
    waiting_for: list[str] = field(default_factory=list)  # next nodes when paused
    interrupt: Any = None  # the payload the paused node asked about


def initial_state(run_id: str) -> dict[str, Any]:
    """The input of a fresh run."""
    return {"run_id": run_id}


def thread_config(run_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": run_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable, "recursion_limit": RECURSION_LIMIT}


def _branch_capability(update: dict[str, Any]) -> str | None:
    caps = update.get("capabilities") if isinstance(update, dict) else None
    return next(iter(caps)) if isinstance(caps, dict) and len(caps) == 1 else None


async def drive(
    graph: Any,
    run_id: str,
    context: GraphContext,
    *,
    start: dict[str, Any] | None,
    on_event: Callable[[Event], None] | None = None,
) -> Outcome:
    """Run (start = initial state) or resume (start = None) the run's thread until it ends or pauses."""
    cfg = thread_config(run_id)
    stream = graph.astream(start, cfg, context=context, stream_mode="updates", subgraphs=True, durability="sync")
    async for namespace, chunk in stream:
        if on_event is None:
            continue
        for node, update in chunk.items():
            if node.startswith("__") or (node == "capability" and not namespace):
                continue
            in_branch = bool(namespace) and namespace[0].startswith("capability:")
            on_event(Event(node, update or {}, _branch_capability(update or {}) if in_branch else None))
    snap = await graph.aget_state(cfg)
    if snap.next:
        payload = snap.interrupts[0].value if snap.interrupts else None
        return Outcome("paused", dict(snap.values), list(snap.next), payload)
    return Outcome("done", dict(snap.values))
