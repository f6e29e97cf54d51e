"""The Store: one object per process, safe to call from many threads.

    with Store("sqlite:///.gapforge/gapforge.db") as store:
        run_id = store.create_run("trace", config)
        store.put_episode(run_id, "retail", "task-1", 0, policy="base", ...)

The query methods live in mixins by stage: store/runs.py (runs, episodes), store/analysis.py (capabilities, labels,
statistics), store/artifacts.py (synthetic envs, validations, adapters, evaluations). Every method opens its own
short session and returns detached rows (store/rows.py), so async callers run them with `asyncio.to_thread`.
"""

from __future__ import annotations

from sqlalchemy import select

from gapforge.store.analysis import AnalysisQueries
from gapforge.store.artifacts import ArtifactQueries
from gapforge.store.leases import LeaseQueries
from gapforge.store.models import SCHEMA_VERSION, StoreMeta
from gapforge.store.runs import RunQueries


class Store(RunQueries, AnalysisQueries, ArtifactQueries, LeaseQueries):
    """Engine + schema for a store URL (SQLite file or PostgreSQL); raises StoreError if unusable."""

    def __init__(self, url: str, *, must_exist: bool = False) -> None:
        super().__init__(url, must_exist=must_exist)
        try:
            self._check_schema_version()
            self.reap_dead_leases()  # a SIGKILLed holder's run reads `interrupted`, not `running`, from now on
        except BaseException:
            self.close()
            raise

    def _check_schema_version(self) -> None:
        query = select(StoreMeta.value).where(StoreMeta.key == "schema_version")
        with self._read() as session:  # written once; reading it takes no write lock a stuck writer could hold
            found = session.scalars(query).first()
        if found is None:
            with self._write() as session:
                stmt = self._insert(StoreMeta).values(key="schema_version", value=SCHEMA_VERSION)
                session.execute(stmt.on_conflict_do_nothing(index_elements=["key"]))
                found = session.scalars(query).one()
        self._check_version(found, f"needs {SCHEMA_VERSION}: use a new workspace or store URL")
