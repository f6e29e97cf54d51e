"""Selection: statistics over the stored labels of R passes -> stored per-pass stats, per-capability summaries and
the retained flag. Every write is an upsert: other thresholds (`--set analysis.delta=0.3`) recompute from the same
labels with no LLM call.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import current_dictionary
from gapforge.agents.analysis.split import analysis_episodes
from gapforge.agents.analysis.statistics import CapabilityStatistics, LabelRecord, compute_statistics
from gapforge.agents.errors import AnalysisError

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(frozen=True)
class SelectionResult:
    run_id: str
    dictionary_hash: str
    passes: int
    required_passes: int
    episodes: int
    statistics: tuple[CapabilityStatistics, ...]
    retained: tuple[str, ...]
    labeling_failures: dict[int, int]  # pass -> episodes whose labeling failed in that pass


def label_records(store: Store, run_id: str, cfg: AnalysisConfig) -> tuple[list[LabelRecord], list[Any]]:
    """The label table of the run's analysis-split episodes (passes 0..R-1)."""
    episodes = {e.id: e for e in analysis_episodes(store, run_id, fraction=cfg.split_fraction, seed=cfg.seed)}
    records = [
        LabelRecord(lab.episode_id, ep.task_id, bool(ep.success), lab.capability, lab.pass_index, lab.value)
        for lab in store.labels(run_id)
        if (ep := episodes.get(lab.episode_id)) is not None and lab.pass_index < cfg.passes
    ]
    return records, list(episodes.values())


_SUMMARY = ("kept_passes", "required_passes", "er_plus", "er_minus", "gap", "coverage", "kappa", "retained", "verdict")


def select(store: Store, run_id: str, *, cfg: AnalysisConfig) -> SelectionResult:
    """Compute, store and return the statistics and the retained capabilities of a labeled run."""
    capabilities, dhash = current_dictionary(store, run_id)
    calls = store.label_calls(run_id)
    labeled_passes = {c.pass_index for c in calls if c.dictionary_hash == dhash}
    missing = [p for p in range(cfg.passes) if p not in labeled_passes]
    if missing:
        raise AnalysisError(
            f"run {run_id!r}: labeling pass(es) {missing} not run yet: label them first (gapforge analyze {run_id})"
        )
    records, episodes = label_records(store, run_id, cfg)
    in_split = {e.id for e in episodes}
    failures = Counter(
        c.pass_index for c in calls if c.status == "failed" and c.dictionary_hash == dhash and c.episode_id in in_split
    )
    vote = {"delta": cfg.delta, "rho": cfg.rho, "required_passes": cfg.required_passes, "exclude": set(cfg.exclude)}
    boot = {"max_retained": cfg.max_retained, "bootstrap": cfg.bootstrap, "seed": cfg.seed}
    stats = compute_statistics(records, [n for n, _ in capabilities], list(range(cfg.passes)), **vote, **boot)
    details = {"delta": cfg.delta, "rho": cfg.rho, "bootstrap": cfg.bootstrap}
    for s in stats:
        for p in s.per_pass:
            rates = {"er_plus": p.er_plus, "er_minus": p.er_minus, "gap": p.gap, "coverage": p.coverage}
            store.put_capability_stat(run_id, s.capability, p.pass_index, **rates, kept=p.kept)
        gap_ci, cov_ci = s.gap_ci or (None, None), s.coverage_ci or (None, None)
        summary = {k: getattr(s, k) for k in _SUMMARY}
        summary.update(dictionary_hash=dhash, passes=cfg.passes, gap_low=gap_ci[0], gap_high=gap_ci[1])
        summary.update(coverage_low=cov_ci[0], coverage_high=cov_ci[1])
        failed = {str(k): v for k, v in sorted(failures.items())}
        summary["details"] = {**details, "tasks": s.tasks, "labeling_failures": failed}
        store.put_capability_summary(run_id, s.capability, summary)
        store.set_capability_retained(run_id, s.capability, s.retained)
    retained = tuple(s.capability for s in stats if s.retained)
    return SelectionResult(
        run_id, dhash, cfg.passes, cfg.required_passes, len(episodes), tuple(stats), retained, dict(failures)
    )
