"""`StoreReader`: the store opened for reading only (the viewer, `gapforge ui`).

It has every read query of `Store` plus the paged ones of store/views.py, and can
write nothing: SQLite connections are `query_only`, PostgreSQL transactions are
read-only, and opening it creates no file, table or index. A missing SQLite file or
an empty database raises `NoStore`; a store of another schema version `StoreError`.

    with StoreReader(url) as reader:
        page = reader.episodes_page(run_id, offset=0, limit=50)
"""

from __future__ import annotations

from sqlalchemy import select

from gapforge.store.analysis import AnalysisQueries
from gapforge.store.artifacts import ArtifactQueries
from gapforge.store.leases import LeaseQueries
from gapforge.store.models import SCHEMA_VERSION, StoreMeta
from gapforge.store.runs import RunQueries
from gapforge.store.views import ViewQueries


class StoreReader(RunQueries, AnalysisQueries, ArtifactQueries, LeaseQueries, ViewQueries):
    def __init__(self, url: str) -> None:
        super().__init__(url, read_only=True)
        try:
            with self._read() as session:
                found = session.scalar(select(StoreMeta.value).where(StoreMeta.key == "schema_version"))
            self._check_version(found, f"reads {SCHEMA_VERSION}: open it with the gapforge that wrote it")
        except BaseException:
            self.close()
            raise
