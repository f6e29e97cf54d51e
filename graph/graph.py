"""Graph assembly (the stages and their order: docs/architecture.md).

    collect_rollouts → discover → label (×R) → select → review ─┬─ Send per capability:
                                                                 │  synthesize ⇄ validate → train
                                                                 └─→ build_router → train_baseline → evaluate → report

`review` is a pass-through unless the run asked for `--review` (then it pauses
for `gapforge review`). Each capability runs as a subgraph so `build_router`
waits for every branch. `graph` at the bottom is the entry `langgraph.json`
exposes (compiled without a checkpointer: the LangGraph server brings its own).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import Checkpointer

from gapforge.graph import nodes
from gapforge.graph.capability import build_capability_graph
from gapforge.graph.context import GraphContext
from gapforge.graph.state import RunState


def build_graph(checkpointer: Checkpointer = None) -> Any:
    """The compiled run graph; pass a checkpointer to make runs resumable."""
    builder = StateGraph(RunState, context_schema=GraphContext)
    builder.add_node("collect_rollouts", nodes.collect_rollouts)
    builder.add_node("discover", nodes.discover)
    builder.add_node("label", nodes.label)
    builder.add_node("select", nodes.select)
    builder.add_node("review", nodes.review)
    builder.add_node("capability", build_capability_graph())
    builder.add_node("build_router", nodes.build_router)
    builder.add_node("train_baseline", nodes.train_baseline)
    builder.add_node("evaluate", nodes.evaluate)
    builder.add_node("report", nodes.report)
    builder.add_edge(START, "collect_rollouts")
    builder.add_edge("collect_rollouts", "discover")
    builder.add_edge("discover", "label")
    builder.add_edge("select", "review")  # static, so `update_state(as_node="select")` re-enters review
    builder.add_edge("capability", "build_router")
    builder.add_edge("build_router", "train_baseline")
    builder.add_edge("train_baseline", "evaluate")
    builder.add_edge("evaluate", "report")
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer, name="gapforge")


graph = build_graph()
