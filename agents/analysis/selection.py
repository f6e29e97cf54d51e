"""Selection: statistics over the stored labels of R passes -> stored per-pass stats,
per-capability summaries, and the retained flag on each capability.

Idempotent per run: every write is an upsert; re-running with other thresholds
(e.g. `--set analysis.delta=0.3`) recomputes from the same labels with no LLM call.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import current_dictionary
from gapforge.agents.analysis.errors import AnalysisError
from gapforge.agents.analysis.split import analysis_episodes
from gapforge.agents.analysis.statistics import CapabilityStatistics, LabelRecord, compute_statistics


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


def label_records(store: Any, run_id: str, cfg: AnalysisConfig) -> tuple[list[LabelRecord], list[Any]]:
    """The label table of the run's analysis-split episodes (passes 0..R-1)."""
    episodes = {e.id: e for e in analysis_episodes(store, run_id, fraction=cfg.split_fraction, seed=cfg.seed)}
    records = [
        LabelRecord(
            lab.episode_id,
            episodes[lab.episode_id].task_id,
            bool(episodes[lab.episode_id].success),
            lab.capability,
            lab.pass_index,
            lab.value,
        )
        for lab in store.labels(run_id)
        if lab.episode_id in episodes and lab.pass_index < cfg.passes
    ]
    return records, list(episodes.values())


def select(store: Any, run_id: str, *, cfg: AnalysisConfig) -> SelectionResult:
    """Compute, store and return the statistics and the retained capabilities of a labeled run."""
    capabilities, dhash = current_dictionary(store, run_id)
    names = [n for n, _ in capabilities]
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
    stats = compute_statistics(
        records,
        names,
        list(range(cfg.passes)),
        delta=cfg.delta,
        rho=cfg.rho,
        required_passes=cfg.required_passes,
        bootstrap=cfg.bootstrap,
        seed=cfg.seed,
        max_retained=cfg.max_retained,
        exclude=set(cfg.exclude),
    )
    for s in stats:
        for p in s.per_pass:
            store.put_capability_stat(
                run_id,
                s.capability,
                p.pass_index,
                er_plus=p.er_plus,
                er_minus=p.er_minus,
                gap=p.gap,
                coverage=p.coverage,
                kept=p.kept,
            )
        store.put_capability_summary(
            run_id,
            s.capability,
            {
                "dictionary_hash": dhash,
                "passes": cfg.passes,
                "kept_passes": s.kept_passes,
                "required_passes": s.required_passes,
                "er_plus": s.er_plus,
                "er_minus": s.er_minus,
                "gap": s.gap,
                "gap_low": s.gap_ci[0] if s.gap_ci else None,
                "gap_high": s.gap_ci[1] if s.gap_ci else None,
                "coverage": s.coverage,
                "coverage_low": s.coverage_ci[0] if s.coverage_ci else None,
                "coverage_high": s.coverage_ci[1] if s.coverage_ci else None,
                "kappa": s.kappa,
                "retained": s.retained,
                "verdict": s.verdict,
                "details": {
                    "delta": cfg.delta,
                    "rho": cfg.rho,
                    "bootstrap": cfg.bootstrap,
                    "tasks": s.tasks,
                    "labeling_failures": {str(k): v for k, v in sorted(failures.items())},
                },
            },
        )
        store.set_capability_retained(run_id, s.capability, s.retained)
    retained = tuple(s.capability for s in stats if s.retained)
    return SelectionResult(
        run_id, dhash, cfg.passes, cfg.required_passes, len(episodes), tuple(stats), retained, dict(failures)
    )
