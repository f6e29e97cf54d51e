"""Copy a run's stored work into a fork (`gapforge fork`: a new run id) in one transaction, so the fork redoes none of
it: the episodes, the analysis split, the capability dictionary, the labels and the labeling cache are copied under the
new id with the episode ids remapped (0 new rollouts, 0 new labeling calls); the parent's rows are not touched. Generic
over columns; a table this installation's store does not have is skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, insert, select

if TYPE_CHECKING:
    from gapforge.store import Store

# Per kind of shared work, the tables to copy, in foreign-key order.
TABLES = {
    "rollouts": ("episodes", "analysis_splits"),
    "analysis": ("discoveries", "capabilities", "labels", "label_calls"),
}
_SKIP = {"id"}
_RESET = {"capabilities": {"retained": None}}  # the fork's select decides again


def _remap(column: str, value: Any, episode_ids: dict[int, int]) -> Any:
    if column == "episode_id" and value is not None:
        return episode_ids[int(value)]
    if column.endswith("episode_ids") and isinstance(value, list):
        return [episode_ids.get(int(v), v) for v in value]
    return value


def copy_shared_work(store: Store, parent_run: str, new_run: str, kinds: list[str]) -> dict[str, int]:
    """Copy the parent's rows of `kinds` (see TABLES) to `new_run`; returns rows copied per table."""
    from gapforge.store.models import Base

    tables: dict[str, Table] = Base.metadata.tables  # type: ignore[assignment]
    copied: dict[str, int] = {}
    episode_ids: dict[int, int] = {}
    with store._write(new_run) as session:  # one transaction: a kill leaves nothing half-copied
        for kind in kinds:
            for name in TABLES[kind]:
                table = tables.get(name)
                if table is None or "run_id" not in table.c:
                    continue
                query = select(table).where(table.c.run_id == parent_run).order_by(table.c.id)
                rows = session.execute(query).mappings().all()
                for row in rows:
                    values = {c: _remap(c, v, episode_ids) for c, v in row.items() if c not in _SKIP}
                    values["run_id"] = new_run
                    values.update(_RESET.get(name, {}))
                    new_id = session.execute(insert(table).values(**values).returning(table.c.id)).scalar_one()
                    if name == "episodes":
                        episode_ids[int(row["id"])] = int(new_id)
                copied[name] = len(rows)
    return copied
