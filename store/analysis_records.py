"""Analysis records beyond capabilities/labels/stats: labeling calls (the labeling cache, its failures and cost),
the discovery record, the task split, per-capability summaries.

Writes are keyed upserts, so a resumed stage never duplicates rows. A labeling call and its labels are written in
ONE transaction: a process killed mid-pass leaves both or neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, tuple_

from gapforge.store.engine import StoreBase, no_capability
from gapforge.store.errors import StoreError
from gapforge.store.models import AnalysisSplit, CapabilitySummary, Discovery, Label, LabelCall, utcnow
from gapforge.store.rows import LABEL_VALUES


@dataclass(frozen=True, slots=True)
class LabelCallRow:
    id: int
    run_id: str
    episode_id: int
    pass_index: int
    dictionary_hash: str
    prompt_name: str
    prompt_version: str
    status: str
    boundary: str | None
    error: str | None
    answer: list[Any]
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seed: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class LabelCallRecord:
    """One labeling call to record (put_label_calls): its cache key, outcome, labels
    [(capability, value, evidence)] and cost. status: "ok" | "failed"."""

    episode_id: int
    pass_index: int
    dictionary_hash: str
    prompt_name: str
    prompt_version: str
    status: str
    labels: Sequence[tuple[str, str, str]] = ()
    boundary: str | None = None
    error: str | None = None
    calls: int = 1
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class DiscoveryRow:
    id: int
    run_id: str
    dictionary_hash: str
    prompt_name: str
    prompt_version: str
    sample_episode_ids: list[Any]
    details: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class AnalysisSplitRow:
    id: int
    run_id: str
    env: str
    seed: int
    fraction: float
    analysis_tasks: list[Any]
    heldout_tasks: list[Any]
    families: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class CapabilitySummaryRow:
    id: int
    run_id: str
    capability: str
    dictionary_hash: str
    passes: int
    kept_passes: int
    required_passes: int
    er_plus: float | None
    er_minus: float | None
    gap: float | None
    gap_low: float | None
    gap_high: float | None
    coverage: float | None
    coverage_low: float | None
    coverage_high: float | None
    kappa: float | None
    retained: bool
    verdict: str
    details: dict[str, Any]
    created_at: datetime
    updated_at: datetime


_UPSERTS: dict[str, Any] = {}  # dialect -> the label-call upsert statement


def check_label(capability: str, value: str) -> None:
    if value not in LABEL_VALUES:
        raise StoreError(f"bad label {value!r} for capability {capability!r}: use one of {', '.join(LABEL_VALUES)}")


class AnalysisRecordQueries(StoreBase):
    # --- labeling calls (cache, failures, cost) --------------------------------------------------
    def put_label_calls(self, run_id: str, records: Sequence[LabelCallRecord]) -> None:
        """Record labeling calls and replace each one's (episode, pass) labels, all in ONE
        transaction: three statements whatever the batch size (the labeling hot loop writes
        what finished while the previous write ran, see agents/analysis/labeling.py)."""
        if not records:
            return
        for r in records:
            if r.status not in ("ok", "failed"):
                raise StoreError(f"bad label call status {r.status!r}: use 'ok' or 'failed'")
            for capability, value, _ in r.labels:
                check_label(capability, value)
        calls = [
            {
                "run_id": run_id,
                "episode_id": int(r.episode_id),
                "pass_index": int(r.pass_index),
                "dictionary_hash": r.dictionary_hash,
                "prompt_name": r.prompt_name,
                "prompt_version": r.prompt_version,
                "status": r.status,
                "boundary": r.boundary,
                "error": r.error,
                "answer": [{"capability": c, "label": v, "evidence": e} for c, v, e in r.labels],
                "calls": int(r.calls),
                "prompt_tokens": int(r.prompt_tokens),
                "completion_tokens": int(r.completion_tokens),
                "seed": int(r.seed),
            }
            for r in records
        ]
        now = utcnow()
        labels = [
            {
                "run_id": run_id,
                "episode_id": int(r.episode_id),
                "capability": c,
                "pass_index": int(r.pass_index),
                "value": v,
                "evidence": e,
                "created_at": now,
                "updated_at": now,
            }
            for r in records
            for c, v, e in r.labels
        ]
        stale = tuple_(Label.episode_id, Label.pass_index).in_(
            [(int(r.episode_id), int(r.pass_index)) for r in records]
        )
        missing = f"label call for run {run_id!r} names an episode or capability that is not stored: store those first"
        with self._write(run_id, missing) as session:
            # Core statements on the tables: the ORM's bulk and synchronize-session paths cost
            # more CPU than the SQL itself, and no ORM object is alive here
            session.execute(self._label_call_upsert(), calls)
            session.execute(delete(Label.__table__).where(Label.run_id == run_id, stale))
            if labels:
                session.execute(insert(Label.__table__), labels)

    def _label_call_upsert(self) -> Any:
        """INSERT .. ON CONFLICT (cache key) DO UPDATE, built once per dialect: building its
        `excluded` columns costs more CPU than running it."""
        if self.dialect not in _UPSERTS:
            stmt = self._insert(LabelCall.__table__)
            key = ("episode_id", "pass_index", "dictionary_hash", "prompt_version")
            columns = [c.name for c in LabelCall.__table__.columns if c.name not in (*key, "id", "created_at")]
            _UPSERTS[self.dialect] = stmt.on_conflict_do_update(
                index_elements=list(key), set_={c: stmt.excluded[c] for c in columns}
            )
        return _UPSERTS[self.dialect]

    def label_call_status(
        self, run_id: str, pass_index: int, dictionary_hash: str, prompt_version: str
    ) -> dict[int, str]:
        """episode id -> "ok" | "failed" for the calls already made under this cache key."""
        stmt = select(LabelCall.episode_id, LabelCall.status).filter_by(
            run_id=run_id, pass_index=pass_index, dictionary_hash=dictionary_hash, prompt_version=prompt_version
        )
        with self._read() as session:
            self._require_run(session, run_id)
            return {int(e): s for e, s in session.execute(stmt)}

    def label_calls(self, run_id: str, pass_index: int | None = None, status: str | None = None) -> list[LabelCallRow]:
        order = [LabelCall.pass_index, LabelCall.episode_id]
        return self._list(LabelCallRow, LabelCall, run_id, order, pass_index=pass_index, status=status)

    # --- discovery ---------------------------------------------------------------------------------
    def put_discovery(
        self,
        run_id: str,
        *,
        dictionary_hash: str,
        prompt_name: str,
        prompt_version: str,
        sample_episode_ids: Sequence[int],
        details: Mapping[str, Any],
    ) -> DiscoveryRow:
        values = {
            "run_id": run_id,
            "dictionary_hash": dictionary_hash,
            "prompt_name": prompt_name,
            "prompt_version": prompt_version,
            "sample_episode_ids": [int(i) for i in sample_episode_ids],
            "details": dict(details),
        }
        return self._put(DiscoveryRow, Discovery, values, ("run_id",))

    def get_discovery(self, run_id: str) -> DiscoveryRow | None:
        return self._one(DiscoveryRow, Discovery, run_id)

    # --- the task split ----------------------------------------------------------------------------
    def put_split(
        self,
        run_id: str,
        *,
        env: str,
        seed: int,
        fraction: float,
        analysis_tasks: Sequence[str],
        heldout_tasks: Sequence[str],
        families: Mapping[str, str],
    ) -> AnalysisSplitRow:
        values = {
            "run_id": run_id,
            "env": env,
            "seed": int(seed),
            "fraction": float(fraction),
            "analysis_tasks": list(analysis_tasks),
            "heldout_tasks": list(heldout_tasks),
            "families": dict(families),
        }
        return self._put(AnalysisSplitRow, AnalysisSplit, values, ("run_id",))

    def get_split(self, run_id: str) -> AnalysisSplitRow | None:
        """The run's stored split (evaluation reads `heldout_tasks` from it), or None."""
        return self._one(AnalysisSplitRow, AnalysisSplit, run_id)

    # --- per-capability summaries ------------------------------------------------------------------
    def put_capability_summary(self, run_id: str, capability: str, values: Mapping[str, Any]) -> CapabilitySummaryRow:
        """Upsert by (run, capability); `values` holds the other columns of CapabilitySummary."""
        row = {"run_id": run_id, "capability": capability, **values}
        key = ("run_id", "capability")
        return self._put(CapabilitySummaryRow, CapabilitySummary, row, key, no_capability(run_id, capability))

    def capability_summaries(self, run_id: str) -> list[CapabilitySummaryRow]:
        return self._list(CapabilitySummaryRow, CapabilitySummary, run_id, [CapabilitySummary.id])
