"""Contrastive capability analysis: the capability dictionary, labels and per-pass statistics.

All writes are upserts on the table's unique key (latest write wins): a re-run step replaces its own rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select

from gapforge.store.analysis_records import AnalysisRecordQueries, check_label
from gapforge.store.engine import StoreBase, no_capability
from gapforge.store.errors import StoreError
from gapforge.store.models import Capability, CapabilityStat, Label, utcnow
from gapforge.store.rows import CapabilityRow, CapabilityStatRow, LabelRow, LabelValue


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
        return self._put(CapabilityRow, Capability, values, ("run_id", "name"))

    def set_capability_retained(self, run_id: str, name: str, retained: bool) -> None:
        """Record the stability vote (kept in >= K of R passes) on the capability itself."""
        with self._write(run_id) as session:
            cap = session.scalars(
                select(Capability).where(Capability.run_id == run_id, Capability.name == name)
            ).first()
            if cap is None:
                self._require_run(session, run_id)
                raise StoreError(no_capability(run_id, name))
            cap.retained, cap.updated_at = retained, utcnow()

    def get_capability(self, run_id: str, name: str) -> CapabilityRow | None:
        return self._one(CapabilityRow, Capability, run_id, name=name)

    def capabilities(self, run_id: str, retained: bool | None = None) -> list[CapabilityRow]:
        return self._list(CapabilityRow, Capability, run_id, [Capability.id], retained=retained)

    # --- labels -------------------------------------------------------------------------------
    def put_labels(self, run_id: str, pass_index: int, labels: Iterable[LabelIn]) -> int:
        """Upsert labels of one pass in one transaction, keyed by (episode, capability, pass); returns the count."""
        items = list(labels)
        for item in items:
            check_label(item.capability, item.value)
        missing = f"labels for run {run_id!r} name an episode or capability that is not stored: store those first"
        with self._write(run_id, missing) as session:
            for item in items:
                values = {"run_id": run_id, "pass_index": pass_index, **dataclasses.asdict(item)}
                self._upsert(session, Label, values, ("episode_id", "capability", "pass_index"))
        return len(items)

    def labels(self, run_id: str, pass_index: int | None = None, capability: str | None = None) -> list[LabelRow]:
        order = [Label.pass_index, Label.capability, Label.episode_id]
        return self._list(LabelRow, Label, run_id, order, pass_index=pass_index, capability=capability)

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
        key = ("run_id", "capability", "pass_index")
        return self._put(CapabilityStatRow, CapabilityStat, values, key, no_capability(run_id, capability))

    def capability_stats(self, run_id: str, capability: str | None = None) -> list[CapabilityStatRow]:
        order = [CapabilityStat.capability, CapabilityStat.pass_index]
        return self._list(CapabilityStatRow, CapabilityStat, run_id, order, capability=capability)
