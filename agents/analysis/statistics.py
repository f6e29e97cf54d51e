"""Statistics of the contrastive analysis: pure functions over a label table.

Per capability c and pass:
    ER+(c) = LACKING among successes / non-NA among successes
    ER-(c) = LACKING among failures / non-NA among failures
    gap    = ER- - ER+
    coverage = LACKING among failures / labeled failures (|D-| of that pass)
A rate whose denominator is empty is undefined (None), never 0; so is a gap with an
undefined side. A pass keeps c when gap >= delta and coverage >= rho.

Across the R passes: pooled rates (every (episode, pass) label counts), percentile
bootstrap 95% intervals for the pooled gap and coverage resampling TASKS (all episodes
and passes of a task move together), Fleiss' kappa of the labels across passes
(raters = passes, subjects = episodes labeled in every pass), and the vote: retained
iff kept in >= K of R passes; a capability whose pooled gap is undefined is
"insufficient evidence" and never retained. Episodes without labels in a pass
(labeling failures) are left out of that pass's denominators, not counted as NA.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

CATEGORIES = ("NA", "PRESENT", "LACKING")


@dataclass(frozen=True)
class LabelRecord:
    episode_id: int
    task_id: str
    success: bool
    capability: str
    pass_index: int
    value: str  # NA | PRESENT | LACKING


@dataclass(frozen=True)
class Tally:
    lacking_success: int = 0
    needed_success: int = 0  # non-NA among successes
    lacking_failure: int = 0
    needed_failure: int = 0
    failures: int = 0  # labeled failed episodes (coverage denominator)

    def __add__(self, o: "Tally") -> "Tally":
        return Tally(*(a + b for a, b in zip(self.as_tuple(), o.as_tuple())))

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.lacking_success, self.needed_success, self.lacking_failure, self.needed_failure, self.failures)


def rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def rates(t: Tally) -> tuple[float | None, float | None, float | None, float | None]:
    """(ER+, ER-, gap, coverage) of a tally; None where undefined."""
    er_plus, er_minus = rate(t.lacking_success, t.needed_success), rate(t.lacking_failure, t.needed_failure)
    gap = None if er_plus is None or er_minus is None else er_minus - er_plus
    return er_plus, er_minus, gap, rate(t.lacking_failure, t.failures)


@dataclass(frozen=True)
class PassStat:
    capability: str
    pass_index: int
    er_plus: float | None
    er_minus: float | None
    gap: float | None
    coverage: float | None
    kept: bool
    tally: Tally


@dataclass(frozen=True)
class CapabilityStatistics:
    capability: str
    per_pass: tuple[PassStat, ...]
    er_plus: float | None
    er_minus: float | None
    gap: float | None
    gap_ci: tuple[float, float] | None
    coverage: float | None
    coverage_ci: tuple[float, float] | None
    kappa: float | None
    kept_passes: int
    required_passes: int
    retained: bool
    verdict: str  # retained | unstable | below thresholds | insufficient evidence | deferred (max_retained) | excluded
    tasks: int


def kept(gap: float | None, coverage: float | None, delta: float, rho: float) -> bool:
    return gap is not None and coverage is not None and gap >= delta - 1e-12 and coverage >= rho - 1e-12


def _tallies(records: Sequence[LabelRecord]) -> dict[tuple[str, int, str], Tally]:
    """(capability, pass, task) -> Tally; failures counted once per labeled failed episode."""
    out: dict[tuple[str, int, str], Tally] = defaultdict(Tally)
    for r in records:
        lack, need = int(r.value == "LACKING"), int(r.value != "NA")
        t = Tally(lack, need, 0, 0, 0) if r.success else Tally(0, 0, lack, need, 1)
        out[(r.capability, r.pass_index, r.task_id)] = out[(r.capability, r.pass_index, r.task_id)] + t
    return out


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa of a subjects x categories count table (every row sums to the same R >= 2).
    1.0 when every subject is labeled identically by all raters (even if one category only)."""
    counts = np.asarray(table, dtype=float)
    if counts.ndim != 2 or counts.shape[0] == 0:
        return None
    r = counts[0].sum()
    if r < 2 or not np.allclose(counts.sum(axis=1), r):
        return None
    p_i = ((counts**2).sum(axis=1) - r) / (r * (r - 1))
    p_bar = p_i.mean()
    p_j = counts.sum(axis=0) / (counts.shape[0] * r)
    p_e = float((p_j**2).sum())
    if abs(1.0 - p_e) < 1e-12:
        return 1.0 if abs(p_bar - 1.0) < 1e-12 else None
    return float((p_bar - p_e) / (1.0 - p_e))


def _kappa(records: Sequence[LabelRecord], passes: Sequence[int]) -> float | None:
    by_episode: dict[int, dict[int, str]] = defaultdict(dict)
    for r in records:
        by_episode[r.episode_id][r.pass_index] = r.value
    rows = [
        [sum(v[p] == c for p in passes) for c in CATEGORIES] for v in by_episode.values() if all(p in v for p in passes)
    ]
    return fleiss_kappa(rows) if len(passes) >= 2 else None


def bootstrap_ci(
    task_tallies: Sequence[Tally], n: int, seed: int
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """Percentile 95% intervals of the pooled gap and coverage, resampling tasks with replacement."""
    if n <= 0 or not task_tallies:
        return None, None
    counts = np.array([t.as_tuple() for t in task_tallies], dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(counts), size=(n, len(counts)))
    s = counts[idx].sum(axis=1)  # n x 5
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = s[:, 2] / s[:, 3] - s[:, 0] / s[:, 1]
        cov = s[:, 2] / s[:, 4]

    def ci(values: np.ndarray) -> tuple[float, float] | None:
        ok = values[np.isfinite(values)]
        return None if ok.size == 0 else (float(np.percentile(ok, 2.5)), float(np.percentile(ok, 97.5)))

    return ci(gap), ci(cov)


def compute_statistics(
    records: Sequence[LabelRecord],
    capabilities: Sequence[str],
    passes: Sequence[int],
    *,
    delta: float,
    rho: float,
    required_passes: int,
    bootstrap: int = 1000,
    seed: int = 0,
    max_retained: int | None = None,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[CapabilityStatistics]:
    """Per-pass and across-pass statistics of every capability (see the module doc). A capability in `exclude` the vote
    retains is not retained, verdict "excluded" (first: it does not take a place under `max_retained`). With
    `max_retained`, only that many of the capabilities the vote retains stay retained: the largest pooled gap first
    (then coverage, then the dictionary's order); the others keep their statistics, are not retained, and their
    verdict is "deferred"."""
    tallies = _tallies(records)
    tasks = sorted({r.task_id for r in records})
    by_cap: dict[str, list[LabelRecord]] = defaultdict(list)
    for r in records:
        by_cap[r.capability].append(r)
    out = []
    for k, cap in enumerate(capabilities):
        per_pass = []
        for p in passes:
            t = sum((tallies.get((cap, p, task), Tally()) for task in tasks), Tally())
            er_p, er_m, gap, cov = rates(t)
            per_pass.append(PassStat(cap, p, er_p, er_m, gap, cov, kept(gap, cov, delta, rho), t))
        per_task = [sum((tallies.get((cap, p, task), Tally()) for p in passes), Tally()) for task in tasks]
        pooled = sum(per_task, Tally())
        er_p, er_m, gap, cov = rates(pooled)
        gap_ci, cov_ci = bootstrap_ci(per_task, bootstrap, seed + k)
        n_kept = sum(s.kept for s in per_pass)
        if gap is None:
            verdict, retained = "insufficient evidence", False
        elif n_kept >= required_passes:
            verdict, retained = ("excluded", False) if cap in exclude else ("retained", True)
        else:
            verdict, retained = ("below thresholds" if n_kept == 0 else "unstable"), False
        pooled_stats = (er_p, er_m, gap, gap_ci, cov, cov_ci, _kappa(by_cap[cap], passes))
        vote = (n_kept, required_passes, retained, verdict, len(tasks))
        out.append(CapabilityStatistics(cap, tuple(per_pass), *pooled_stats, *vote))
    if max_retained is not None:
        ranked = sorted(
            (s for s in out if s.retained),
            key=lambda s: (-(s.gap or 0.0), -(s.coverage or 0.0), capabilities.index(s.capability)),
        )
        over = {s.capability for s in ranked[max_retained:]}
        out = [replace(s, retained=False, verdict="deferred") if s.capability in over else s for s in out]
    return out
