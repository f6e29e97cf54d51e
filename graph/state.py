"""The graph's state: ids, statuses and small summaries — never trajectories, code or tensors.

Everything here is plain JSON-able data (dicts, lists, str, numbers), so any
checkpointer can store it and `gapforge state` / `history` can show it without
importing stage code. Reducers exist only where values accumulate: the
per-capability table (written by parallel `Send` branches), the stage statuses
and the cost counters (per stage, and per capability: its own synthesize, validate and train stages).
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

STAGES = (
    "collect_rollouts",
    "discover",
    "label",
    "select",
    "review",
    "synthesize",
    "validate",
    "train",
    "build_router",
    "train_baseline",
    "evaluate",
    "report",
)

# Status words used in `stages` and per capability ("unavailable": only in the states of earlier runs, when a stage
# could be missing from an installation; `gapforge state` and the viewer still show it).
DONE, FAILED, UNAVAILABLE, SKIPPED = "done", "failed", "unavailable", "skipped"
UNSYNTHESIZED, TRAINED = "unsynthesized", "trained"


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Shallow-merge maps of sub-dicts: a key's sub-dict is updated field by field (later wins)."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def add_costs(
    left: dict[str, dict[str, float]] | None, right: dict[str, dict[str, float]] | None
) -> dict[str, dict[str, float]]:
    """Cost counters per stage: numbers add up across nodes, passes and capabilities."""
    out = {stage: dict(counters) for stage, counters in (left or {}).items()}
    for stage, counters in (right or {}).items():
        into = out.setdefault(stage, {})
        for key, value in counters.items():
            into[key] = round(into.get(key, 0) + value, 6)
    return out


class CapabilityState(TypedDict, total=False):
    """One row of the per-capability table (all fields optional: filled stage by stage)."""

    status: str  # retained | synthesizing | unsynthesized | trained | failed | unavailable | dropped
    gap: float | None
    coverage: float | None
    kept_passes: int
    attempts: int
    env_id: int | None  # the accepted synthetic env's store id
    verdict: str  # last validation verdict in one line
    adapter: str | None  # adapter name in the store
    heldout_before: float | None
    heldout_after: float | None
    kept_step: (
        int | None
    )  # 0: no training step beat the untrained adapter on held-out seeds (the adapter is the identity)
    error: str  # why it failed, blamed on the boundary (sandbox, model, env code, ...)


class RunState(TypedDict, total=False):
    """The whole graph state of one run (thread id == run id)."""

    run_id: str  # the store rows of every stage are keyed by it
    stage: str  # the last stage that finished
    stages: Annotated[dict[str, str], merge_dicts]  # stage -> done | failed | unavailable | skipped
    notes: Annotated[dict[str, str], merge_dicts]  # stage -> one line (why unavailable/failed, what was made)
    rollouts: dict[str, Any]  # episodes, successes, pass_rate
    dictionary: list[str]  # candidate capabilities from discovery
    label_passes: list[int]  # labeling passes done
    retained: list[str]  # after select (and review)
    review: dict[str, Any] | None  # the reviewer's decision: {"retained": [...], "by": ...}
    capabilities: Annotated[dict[str, CapabilityState], merge_dicts]
    router: dict[str, Any]
    baseline: dict[str, Any]  # the GRPO-on-target baseline adapter: name, steps
    evaluation: dict[str, Any]  # policy name -> pass rate etc. (small)
    report: str | None  # path of the report
    cost: Annotated[dict[str, dict[str, float]], add_costs]
    capability_cost: Annotated[dict[str, dict[str, float]], add_costs]  # capability -> its own stages' counters


class CapabilityTask(TypedDict):
    """What a `Send` hands one capability branch."""

    run_id: str
    capability: str


class CapabilityBranch(TypedDict, total=False):
    """The per-capability subgraph's own state (synthesize <-> validate -> train)."""

    run_id: str
    capability: str
    attempt: int
    passed: bool
    capabilities: Annotated[dict[str, CapabilityState], merge_dicts]
    cost: Annotated[dict[str, dict[str, float]], add_costs]
    capability_cost: Annotated[dict[str, dict[str, float]], add_costs]
