"""Contrastive capability analysis: the capability dictionary, labels and per-pass statistics.

All writes are upserts on the table's unique key (latest write wins), so a
re-run discovery, labeling pass or statistics step replaces its own rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select

from gapforge.store.analysis_records import AnalysisRecordQueries
from gapforge.store.engine import StoreBase, no_capability
from gapforge.store.errors import StoreError
from gapforge.store.models import Capability, CapabilityStat, Label, utcnow
from gapforge.store.rows import (
    LABEL_VALUES,
    CapabilityRow,
    CapabilityStatRow,
    LabelRow,
    LabelValue,
    to_row,
)


@dataclass(frozen=True, slots=True)
class LabelIn:
    """One label to store: an episode's value for one capability (pass index given by the call)."""

    episode_id: int
    capability: str
    value: LabelValue
    evidence: str = ""


class AnalysisQueries(AnalysisRecordQueries, StoreBase):
    # --- capabilities -------------------------------------------------------------------------
    def put_capability(
        self,
        run_id: str,
        name: str,
        *,
        definition: str,
        example_episode_ids: Sequence[int] = (),
        prompt_name: str | None = None,
        prompt_version: str | None = None,
    ) -> CapabilityRow:
        """Upsert by (run, name); leaves `retained` as it was."""
        values = {
            "run_id": run_id,
            "name": name,
            "definition": definition,
            "example_episode_ids": [int(i) for i in example_episode_ids],
            "prompt_name": prompt_name,
            "prompt_version": prompt_version,
        }
        with self._write(run_id) as session:
            return to_row(CapabilityRow, self._upsert(session, Capability, values, ("run_id", "name")))

    def set_capability_retained(self, run_id: str, name: str, retained: bool) -> None:
        """Record the stability vote (kept in >= K of R passes) on the capability itself."""
        with self._write(run_id) as session:
            cap = session.scalars(
                select(Capability).where(Capability.run_id == run_id, Capability.name == name)
            ).first()
            if cap is None:
                self._require_run(session, run_id)
                raise StoreError(no_capability(run_id, name))
            cap.retained = retained
            cap.updated_at = utcnow()

    def get_capability(self, run_id: str, name: str) -> CapabilityRow | None:
        with self._read() as session:
            self._require_run(session, run_id)
            cap = session.scalars(
                select(Capability).where(Capability.run_id == run_id, Capability.name == name)
            ).first()
            return None if cap is None else to_row(CapabilityRow, cap)

    def capabilities(self, run_id: str, retained: bool | None = None) -> list[CapabilityRow]:
        stmt = select(Capability).where(Capability.run_id == run_id).order_by(Capability.id)
        if retained is not None:
            stmt = stmt.where(Capability.retained == retained)
        with self._read() as session:
            self._require_run(session, run_id)
            return [to_row(CapabilityRow, c) for c in session.scalars(stmt)]

    # --- labels -------------------------------------------------------------------------------
    def put_labels(self, run_id: str, pass_index: int, labels: Iterable[LabelIn]) -> int:
        """Upsert labels of one pass in one transaction, keyed by (episode, capability, pass); returns the count."""
        items = list(labels)
        for item in items:
            if item.value not in LABEL_VALUES:
                raise StoreError(
                    f"bad label {item.value!r} for capability {item.capability!r}: use one of {', '.join(LABEL_VALUES)}"
                )
        missing = f"labels for run {run_id!r} name an episode or capability that is not stored: store those first"
        with self._write(run_id, missing) as session:
            for item in items:
                values = {
                    "run_id": run_id,
                    "episode_id": item.episode_id,
                    "capability": item.capability,
                    "pass_index": pass_index,
                    "value": item.value,
                    "evidence": item.evidence,
                }
                self._upsert(session, Label, values, ("episode_id", "capability", "pass_index"))
        return len(items)

    def put_label(
        self, run_id: str, episode_id: int, capability: str, pass_index: int, value: LabelValue, evidence: str = ""
    ) -> None:
        self.put_labels(run_id, pass_index, [LabelIn(episode_id, capability, value, evidence)])

    def labels(self, run_id: str, pass_index: int | None = None, capability: str | None = None) -> list[LabelRow]:
        stmt = (
            select(Label).where(Label.run_id == run_id).order_by(Label.pass_index, Label.capability, Label.episode_id)
        )
        if pass_index is not None:
            stmt = stmt.where(Label.pass_index == pass_index)
        if capability is not None:
            stmt = stmt.where(Label.capability == capability)
        with self._read() as session:
            self._require_run(session, run_id)
            return [to_row(LabelRow, lab) for lab in session.scalars(stmt)]

    # --- statistics ---------------------------------------------------------------------------
    def put_capability_stat(
        self,
        run_id: str,
        capability: str,
        pass_index: int,
        *,
        er_plus: float | None,
        er_minus: float | None,
        gap: float | None,
        coverage: float | None,
        kept: bool,
    ) -> CapabilityStatRow:
        """Upsert the statistics of one capability in one labeling pass."""
        values = {
            "run_id": run_id,
            "capability": capability,
            "pass_index": pass_index,
            "er_plus": er_plus,
            "er_minus": er_minus,
            "gap": gap,
            "coverage": coverage,
            "kept": kept,
        }
        with self._write(run_id, no_capability(run_id, capability)) as session:
            row = self._upsert(session, CapabilityStat, values, ("run_id", "capability", "pass_index"))
            return to_row(CapabilityStatRow, row)

    def capability_stats(self, run_id: str, capability: str | None = None) -> list[CapabilityStatRow]:
        stmt = (
            select(CapabilityStat)
            .where(CapabilityStat.run_id == run_id)
            .order_by(CapabilityStat.capability, CapabilityStat.pass_index)
        )
        if capability is not None:
            stmt = stmt.where(CapabilityStat.capability == capability)
        with self._read() as session:
            self._require_run(session, run_id)
            return [to_row(CapabilityStatRow, s) for s in session.scalars(stmt)]
