"""Checkpointer setup: SQLite beside the store by default, PostgreSQL when the store is.

    async with open_checkpointer(store_url, sqlite_path) as saver:
        graph = build_graph(saver)

The store URL decides: a `postgresql[+driver]://` store keeps the checkpoints in
the same database (LangGraph's own tables, created on first use); anything
else keeps them in one SQLite file (default `<workspace>/checkpoints.sqlite`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

_PG = re.compile(r"^postgres(?:ql)?(?:\+\w+)?://", re.IGNORECASE)


class CheckpointerError(Exception):
    """The checkpoint database cannot be opened; the message says what to fix."""


def is_postgres(url: str | None) -> bool:
    return bool(url and _PG.match(url))


def libpq_url(url: str) -> str:
    """SQLAlchemy's `postgresql+psycopg://...` -> the plain `postgresql://...` libpq accepts."""
    return _PG.sub("postgresql://", url, count=1)


def describe(store_url: str | None, sqlite_path: Path) -> str:
    if is_postgres(store_url):
        return "postgresql (the store's database)"
    return f"sqlite {sqlite_path}"


@asynccontextmanager
async def open_checkpointer(store_url: str | None, sqlite_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Yield a ready async checkpointer (tables created) and close it afterwards."""
    if is_postgres(store_url):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError as e:
            raise CheckpointerError(f"the PostgreSQL checkpointer is not installed ({e.name}): pip install 'gapforge[postgres]'") from None
        import psycopg

        try:
            async with AsyncPostgresSaver.from_conn_string(libpq_url(store_url or "")) as saver:
                await saver.setup()
                yield saver
        except psycopg.OperationalError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointerError(f"cannot open the PostgreSQL checkpointer ({first}): check store.url") from None
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    sqlite_path = Path(sqlite_path)
    sqlite_path.parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(sqlite_path)) as saver:
        await saver.setup()
        yield saver
