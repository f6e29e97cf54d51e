"""Checkpointer setup: SQLite beside the store by default, PostgreSQL when the store is.

    async with open_checkpointer(store_url, sqlite_path) as saver:
        graph = build_graph(saver)

The store URL decides: a `postgresql[+driver]://` store keeps the checkpoints in
the same database (LangGraph's own tables, created on first use); anything
else keeps them in one SQLite file (default `<workspace>/checkpoints.sqlite`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

log = logging.getLogger(__name__)

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
async def open_checkpoints_read_only(store_url: str | None, sqlite_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any] | None]:
    """A checkpointer that only reads (the viewer): creates no file or table; None when there are
    no checkpoints yet (no SQLite file / no checkpoint tables in PostgreSQL)."""
    if is_postgres(store_url):
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row

        try:
            async with await psycopg.AsyncConnection.connect(
                libpq_url(store_url or ""), autocommit=True, prepare_threshold=0, row_factory=dict_row,
                options="-c default_transaction_read_only=on",
            ) as conn:
                found = await (await conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL AS present")).fetchone()
                yield AsyncPostgresSaver(conn) if found and found["present"] else None
        except psycopg.OperationalError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointerError(f"cannot open the PostgreSQL checkpointer ({first}): check store.url") from None
        return
    sqlite_path = Path(sqlite_path)
    if not sqlite_path.is_file():
        yield None
        return
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with aiosqlite.connect(f"{sqlite_path.resolve().as_uri()}?mode=ro", uri=True) as conn:
        yield AsyncSqliteSaver(conn)


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
        try:
            yield saver
        finally:
            await _drop_uncommitted(saver)


LOCK_WAIT_S = 2.0


async def _drop_uncommitted(saver: Any) -> None:
    """Roll back a checkpoint write left between its INSERT and its commit when the run ended.

    When one capability branch's error ends the run, LangGraph stops the other branches; one may be
    left inside `aput_writes`, its INSERT run on the connection's worker thread and its commit never
    queued. Closing a connection in that state keeps the file's write lock in this process, so the
    next run in the same process (a resume, a test) fails with "database is locked".

    The saver's lock is taken first, so a writer still alive finishes its commit before this looks
    (a writer abandoned while holding it never releases it: after LOCK_WAIT_S this goes on without).
    The statement queued next is a barrier: every write queued before it has run when it returns.
    A failure here is logged, never raised: it must not replace the error that ended the run."""
    acquired = False
    try:
        try:
            await asyncio.wait_for(saver.lock.acquire(), LOCK_WAIT_S)
            acquired = True
        except TimeoutError:
            pass
        conn = saver.conn
        await (await conn.execute("SELECT 1")).close()
        if conn.in_transaction:  # never committed, so never a checkpoint LangGraph relied on
            await conn.rollback()
    except Exception as e:  # noqa: BLE001 - see the docstring
        log.warning("closing the checkpointer: could not roll back an unfinished write (%s)", e)
    finally:
        if acquired:
            saver.lock.release()
