"""What the graph needs from the outside world: one typed dependencies object.

The graph never builds a store, a sandbox pool or a model. It receives a
`GraphContext` through LangGraph's runtime context; its `stages` attribute is
anything that satisfies the `Stages` protocol below — the composition root
(gapforge/stages/) binds it to the real stages, tests bind it to small fakes. Each method does ONE stage's work for
one run (every method takes the run id; the store rows are keyed by it), is
idempotent per (run, stage, capability) — re-running it after a crash reuses
what the store already holds — never prints, and returns one of the small
typed results below, or raises `StageFailed`, which the node records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from gapforge.faults import InputFault


class StageFailed(InputFault):
    """The stage ran and cannot produce a result from this run's data (e.g. no failed episode
    to contrast). Recorded in the state; the stages that need its output are skipped. Errors of
    a boundary that may recover (an endpoint down) are NOT this: they end the run, resumable."""


@dataclass(frozen=True, slots=True)
class Cost:
    """What a stage spent. Services fill what they know; the node adds wall time."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    policy_rollouts: int = 0
    cpu_s: float = 0.0
    gpu_s: float = 0.0

    def as_counters(self, wall_s: float) -> dict[str, float]:
        counters = {k: v for k, v in asdict(self).items() if v}
        counters["wall_s"] = round(wall_s, 3)
        return counters


# --- results (small: ids, counts, one-line verdicts) ------------------------------------------


@dataclass(frozen=True, slots=True)
class RolloutsDone:
    episodes: int
    successes: int
    ran: int = 0  # new episodes this call (0 on a resumed/complete stage)
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class DiscoveryDone:
    capabilities: list[str]
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class LabelPassDone:
    pass_index: int
    labeled: int  # episodes labeled in this pass
    failures: int = 0  # episodes whose labels failed validation (recorded, not NA)
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class CapabilityStats:
    gap: float | None
    coverage: float | None
    kept_passes: int
    retained: bool
    left_out: str | None = (
        None  # passed the vote, not retained: "deferred" (analysis.max_retained) or "excluded" (analysis.exclude)
    )


@dataclass(frozen=True, slots=True)
class SelectionDone:
    retained: list[str]
    stats: dict[str, CapabilityStats]
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class SynthesisAttempt:
    capability: str
    attempt: int
    env_id: int | None  # store id of the written module (None: the generator produced nothing usable)
    note: str = ""
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class ValidationDone:
    capability: str
    attempt: int
    passed: bool
    verdict: str  # one line: which check failed and why, or "passed"
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class TrainingDone:
    capability: str
    adapter: str | None
    trained: bool
    heldout_before: float | None = None
    heldout_after: float | None = None
    kept_step: int | None = None  # the checkpoint kept (best on held-out seeds); 0 = no step beat the untrained adapter
    error: str = ""  # why training failed (blamed on its boundary)
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class BaselineDone:
    """The GRPO-on-target baseline adapter (the paper's baseline with the adapters' rollout budget)."""

    adapter: str | None  # None: not trained (`skipped` says why, or `error` what failed)
    steps: int = 0
    skipped: str = ""  # e.g. switched off, or no capability adapter whose budget to match
    error: str = ""
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class RouterDone:
    capabilities: list[str]
    summary: dict[str, Any] = field(default_factory=dict)  # e.g. accuracy on held-out synthetic tasks
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class EvaluationDone:
    results: dict[str, dict[str, float]]  # policy name -> {pass_rate, mean_reward, n, ...}
    cost: Cost = Cost()


@dataclass(frozen=True, slots=True)
class ReportDone:
    path: str
    cost: Cost = Cost()
    missing: list[str] = field(default_factory=list)  # parts not in the report yet (e.g. no evaluation stored)


@runtime_checkable
class Stages(Protocol):
    """The stage services, one method per node."""

    async def collect_rollouts(self, run_id: str) -> RolloutsDone: ...

    async def discover(self, run_id: str) -> DiscoveryDone: ...

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone: ...

    async def select(self, run_id: str) -> SelectionDone: ...

    async def synthesize(self, run_id: str, capability: str, attempt: int) -> SynthesisAttempt: ...

    async def validate(self, run_id: str, capability: str, attempt: int) -> ValidationDone: ...

    async def train(self, run_id: str, capability: str) -> TrainingDone: ...

    async def build_router(self, run_id: str, capabilities: list[str]) -> RouterDone: ...

    async def train_baseline(self, run_id: str) -> BaselineDone: ...

    async def evaluate(self, run_id: str, capabilities: list[str]) -> EvaluationDone: ...

    async def report(self, run_id: str, values: dict[str, Any] | None = None) -> ReportDone: ...


@dataclass(frozen=True, slots=True)
class GraphContext:
    """The runtime context of one run: the stage services and the few settings the edges need."""

    stages: Stages
    repeats: int = 3  # labeling passes R (analysis.passes)
    max_attempts: int = 5  # generator attempts per capability
    review: bool = False  # pause after select for `gapforge review`

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1 (got {self.repeats}): set analysis.passes")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 (got {self.max_attempts}): set synthesis.max_attempts")
