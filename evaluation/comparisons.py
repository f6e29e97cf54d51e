"""Comparisons as plug-ins: what a run is compared against (the baselines: the capability-hints prompt, GEPA's
optimised prompt, GRPO on the target) and the analyses of its evaluation (oracle routing, rollout-scaling curves,
the paper's protocol, routed TRACE over subsets of the adapters), each one `Comparison` in `evaluation.registry.registry()`.

The evaluate stage and the report iterate over them instead of naming each:

    prepared = {c.name: await c.prepare(ev) for c in enabled(cfg)}    # before the held-out evaluation (GEPA optimises)
    policies = standard_policies(..., prepared=prepared)                # + each comparison's `policies`
    evaluate_run(...)                                                   # then each one's `scored` (the oracle row)
    played  += await c.extend(ev)   for c in enabled(cfg)               # more evaluations (all tasks, curve points)
    report  += c.report(store, run_id, out_dir, labels)   for c in registry()  # its section and plots, from the store
    demo    += c.lines(store, run_id, cfg)        for c in registry()  # its printed lines (analyses, then baselines)

`enabled`: an optional one (`optional = True`) is on when `evaluation.comparisons` lists its name. The work hooks
(`prepare`, `extend`; training GRPO on the target) run only when it is on; `policies` and `scored` answer from what
they are given (a prepared GEPA prompt, a GRPO-on-target adapter in the backend) and the read hooks (`report`,
`lines`, `labels`) show whatever the run stored, so a report of an older run shows what it has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gapforge.agents.prompted_policy import HintedPolicy

if TYPE_CHECKING:
    from gapforge.evaluation.config import EvaluationConfig
    from gapforge.store import Store


@dataclass
class Evaluation:
    """What a comparison gets from the run being evaluated (the evaluate stage fills it)."""

    store: Store
    run_id: str
    cfg: Any  # the run's GapforgeConfig
    env: str
    make_env: Callable[[], Any]
    tasks: list[str]  # the held-out tasks played (or those given by hand)
    families: dict[str, str]  # task -> family of `tasks`
    split: Any  # the run's stored analysis split (None: none stored)
    artifacts: Any  # evaluation.service.RunArtifacts
    backend: Any
    router: Any
    base_dir: str
    given: bool  # env or tasks were given by hand (not the run's split)
    progress: Callable[[str], None]
    # the stage's evaluate_run under its players: play(run_id, *, artifacts, backend, baseline_path=None, **evaluate_run's)
    play: Callable[..., Awaitable[Any]]
    load_backend: Callable[..., Any] | None = None  # evaluation.service.load_backend (the curve points load their own)
    failure: Callable[[str], Exception] = ValueError  # the stage's "no result from this run's data" (StageFailed)
    policy_rollouts: int = 0  # what the comparisons spent besides the episodes their evaluations played
    llm_calls: int = 0


class Comparison:
    """One plug-in. Every hook does nothing unless a comparison overrides it."""

    name: str = ""
    kind: Literal["baseline", "analysis"] = "analysis"
    optional = False  # False: always on; True: on when evaluation.comparisons names it
    extend_order: int = 0  # `extend` runs in this order (then the registry's): a later one may be stopped by an earlier

    def enabled(self, ecfg: EvaluationConfig) -> bool:
        return not self.optional or self.name in ecfg.comparisons

    async def prepare(self, ev: Evaluation) -> Any:
        """Before the held-out evaluation; the result is `prepared[name]` for `policies`."""
        return None

    def policies(
        self, base: Any, backend: Any, capabilities: Sequence[dict[str, str]], temperature: float, prepared: Any
    ) -> dict[str, Any]:
        """{evaluation name: policy} it adds to an evaluation (workers rebuild them the same way, unprepared)."""
        return {}

    def scored(self, store: Store, run_id: str, *, scope: str, seed: int) -> None:
        """After an evaluation of `run_id` stored its rows `<scope>:<policy>`."""

    async def extend(self, ev: Evaluation) -> int:
        """After the held-out evaluation: more evaluations of its own; returns the episodes they played."""
        return 0

    def report(
        self, store: Store, run_id: str, out_dir: Path, labels: Mapping[str, str]
    ) -> tuple[list[str], list[Path]]:
        """Its report section (markdown lines) and plots, from what the run stored (`labels`: every comparison's)."""
        return [], []

    def lines(self, store: Store, run_id: str, cfg: Any) -> list[str]:
        """The lines `gapforge demo` prints for it (analyses after the gate's line, baselines last)."""
        return []

    def labels(self, store: Store, run_id: str) -> dict[str, str]:
        """Report labels of the evaluation names it adds whose names alone do not say what they are."""
        return {}


CAPABILITY_HINTS = "capability_hints"  # the base with the capability descriptions appended, unoptimised


class _CapabilityHints(Comparison):
    """The base with the run's capability descriptions appended to its system prompt, unoptimised (always on)."""

    name, kind = CAPABILITY_HINTS, "baseline"

    def policies(
        self, base: Any, backend: Any, capabilities: Sequence[dict[str, str]], temperature: float, prepared: Any
    ) -> dict[str, Any]:
        return {CAPABILITY_HINTS: HintedPolicy(base, list(capabilities), name=CAPABILITY_HINTS)}

    def labels(self, store: Store, run_id: str) -> dict[str, str]:
        return {CAPABILITY_HINTS: "capability hints (descriptions appended, unoptimised)"}


HINTS_COMPARISON = _CapabilityHints()
