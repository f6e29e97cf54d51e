"""Checkpointer setup: SQLite beside the store by default, PostgreSQL when the store is.

    async with open_checkpointer(store_url, sqlite_path) as saver:
        graph = build_graph(saver)

The store URL decides: a `postgresql[+driver]://` store keeps the checkpoints in
the same database (LangGraph's own tables, created on first use); anything
else keeps them in one SQLite file (default `<workspace>/checkpoints.sqlite`).
A damaged SQLite file raises `CheckpointDamaged` (one line naming it) and a full
disk `CheckpointDiskFull` (the last checkpoint stands: resumable).
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.faults import Resumable, StoreFault

if TYPE_CHECKING:  # langgraph costs ~0.15 s to import: the CLI imports this module's errors at startup
    from langgraph.checkpoint.base import BaseCheckpointSaver

log = logging.getLogger(__name__)

_PG = re.compile(r"^postgres(?:ql)?(?:\+\w+)?://", re.IGNORECASE)


class CheckpointerError(StoreFault):
    """The checkpoint database cannot be opened; the message says what to fix (it lives beside the store, or in it)."""


class CheckpointDamaged(CheckpointerError):
    """The SQLite checkpoint file is truncated or overwritten; the message names it and what to do."""


class CheckpointDiskFull(Resumable, CheckpointerError):
    """No space left for a checkpoint write. SQLite rolled the write back, so the last checkpoint stands and a resume
    continues from it: an infrastructure stop (`infrastructure = True`, `with_resume`, like agents.errors.IncompleteStage)."""

    infrastructure = True
    exit_code = 3
    resume_wording = (", then resume with `{}`", ", then resume")

    def __init__(self, path: Path, *, resume: str | None = None) -> None:
        self.path = path
        summary = (
            f"no space left on the disk holding the checkpoints {path}; the last checkpoint stands: free space there"
        )
        super().__init__(self._resumable(summary, resume))


def _damaged(path: Path, reason: str) -> CheckpointDamaged:
    return CheckpointDamaged(
        f"the checkpoint file {path} is damaged ({reason}: truncated or overwritten?): restore it from a "
        "backup, or move it aside (the runs' stored work stays in the store; their graph progress "
        "is lost with that file)"
    )


_CHECKED: set[str] = set()  # files whose header this process has read (see _check_length)


def _check_length(path: Path) -> None:
    """CheckpointDamaged when the file is shorter than its SQLite header says (the same O(1) check as
    store.files.sqlite_cut, which graph/ may not import): a cut file answers until a read reaches the missing pages.
    Once per file and process, before any connection of ours: SQLite's POSIX locks belong to the process, and closing
    any descriptor of the file (this read's) drops every lock the process's open connections hold on it."""
    key = str(path.resolve())
    if key in _CHECKED:
        return
    _CHECKED.add(key)
    try:
        with path.open("rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError:
        return
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00") or head[24:28] != head[92:96]:
        return
    page = int.from_bytes(head[16:18], "big")
    expected = (65536 if page == 1 else page) * int.from_bytes(head[28:32], "big")
    if 0 < size < expected:
        raise _damaged(path, f"truncated: {size} bytes, its header says {expected}")


def _sqlite_fault(e: BaseException, path: Path) -> CheckpointerError | None:
    """The checkpointer's own SQLite faults as one-line errors: a full disk (SQLITE_FULL) or a damaged file
    (SQLITE_CORRUPT / SQLITE_NOTADB); None for anything else (raised as it is)."""
    if not isinstance(e, sqlite3.DatabaseError):
        return None
    name, text = getattr(e, "sqlite_errorname", ""), str(e).lower()
    if name == "SQLITE_FULL" or "database or disk is full" in text:
        return CheckpointDiskFull(path)
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text:
        return _damaged(path, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    return None


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
async def open_checkpoints_read_only(
    store_url: str | None, sqlite_path: Path
) -> AsyncIterator[BaseCheckpointSaver[Any] | None]:
    """A checkpointer that only reads (the viewer): creates no file or table; None when there are
    no checkpoints yet (no SQLite file / no checkpoint tables in PostgreSQL)."""
    if is_postgres(store_url):
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row

        try:
            async with await psycopg.AsyncConnection.connect(
                libpq_url(store_url or ""),
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                options="-c default_transaction_read_only=on",
            ) as conn:
                found = await (
                    await conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL AS present")
                ).fetchone()
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

    _check_length(sqlite_path)
    try:
        async with aiosqlite.connect(f"{sqlite_path.resolve().as_uri()}?mode=ro", uri=True) as conn:
            yield AsyncSqliteSaver(conn)
    except sqlite3.DatabaseError as e:
        fault = _sqlite_fault(e, sqlite_path)
        if fault is None:
            raise
        raise fault from None


@asynccontextmanager
async def open_checkpointer(store_url: str | None, sqlite_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Yield a ready async checkpointer (tables created) and close it afterwards."""
    if is_postgres(store_url):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError as e:
            raise CheckpointerError(
                f"the PostgreSQL checkpointer is not installed ({e.name}): pip install 'gapforge[postgres]'"
            ) from None
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
    _check_length(sqlite_path)
    try:
        async with AsyncSqliteSaver.from_conn_string(str(sqlite_path)) as saver:
            await saver.setup()
            try:
                yield saver
            finally:
                await _drop_uncommitted(saver)
    except sqlite3.DatabaseError as e:  # raised by a checkpoint read or write, here or inside the graph's run
        fault = _sqlite_fault(e, sqlite_path)
        if fault is None:
            raise
        raise fault from None


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
