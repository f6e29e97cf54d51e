"""Engine and session plumbing: URL checks, SQLite pragmas, per-call sessions, upserts.

Every store call opens its own short session, so callers may use the store from many threads at once (asyncio tasks
via `asyncio.to_thread`). On SQLite, write transactions start with BEGIN IMMEDIATE and wait up to the busy timeout
for the write lock (WAL lets readers continue meanwhile); deferred transactions could fail with "database is locked"
when two of them upgrade to writers at the same time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from sqlalchemy import URL, Engine, create_engine, event, exc, inspect, make_url, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from gapforge.store import fencing
from gapforge.store.errors import DiskFull, NoStore, StoreDamaged, StoreError, damaged_message, is_damaged, is_disk_full
from gapforge.store.files import sqlite_cut
from gapforge.store.models import SCHEMA_VERSION, Base, Run, utcnow
from gapforge.store.redact import redact
from gapforge.store.rows import R, to_row

SQLITE_BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10
# Paths whose header this process has checked (sqlite_cut), each with whether the file then began as a SQLite file
# (or had no bytes yet: SQLite writes its own header). The check opens the file with plain Python, and SQLite's
# POSIX locks belong to the process: closing ANY descriptor of the file drops every lock this process's connections
# hold on it (a writer's episodes then stayed invisible to other processes until it closed). So the header is read
# once per path, at the first open in the process, before any connection of ours exists -- never on an error path.
_HEADERS: dict[str, bool] = {}
_HEADER_LOCK = threading.Lock()


def _first_open(path: Path) -> bool:
    key = str(path.resolve())
    with _HEADER_LOCK:
        first = key not in _HEADERS
        if first:
            _HEADERS[key] = _sqlite_magic(path)
    return first


URL_HINT = "use sqlite:///PATH/TO/gapforge.db or postgresql+psycopg://USER:PASS@HOST:PORT/DB (config store.url or env GAPFORGE_STORE_URL)"


def parse_url(raw: str) -> URL:
    """Check a store URL and normalise it (bare postgresql:// means the psycopg driver)."""
    try:
        url = make_url(raw)
    except exc.ArgumentError:
        raise StoreError(f"bad store URL {redact(raw)!r}: {URL_HINT}") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise StoreError(
                f"in-memory SQLite store {raw!r} is not supported (each thread would see its own database): {URL_HINT}"
            )
    elif backend == "postgresql":
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
    else:
        raise StoreError(
            f"unsupported store backend {backend!r} in {url.render_as_string(hide_password=True)!r}: {URL_HINT}"
        )
    return url


def _sqlite_engine(url: URL, *, read_only: bool = False, must_exist: bool = False) -> Engine:
    path = Path(url.database or "").expanduser()
    if (read_only or must_exist) and not path.is_file():
        raise NoStore(
            f"no store at {str(path)!r} yet: start a run (`gapforge run` or `gapforge demo`) there, or run from the "
            "directory whose .gapforge/ holds your runs (or point GAPFORGE_WORKSPACE / store.url at it)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(
            f"cannot create the directory of the SQLite store {str(path)!r}: {e.strerror}; pick a writable path"
        ) from None
    # a cut file opens and answers until a read reaches the missing pages
    if _first_open(path) and (cut := sqlite_cut(path)):
        raise StoreDamaged(damaged_message(str(path), cut))
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False})
    # A reader sets query_only (SQLite refuses every write on that connection) and leaves the journal mode as it is.
    pragmas = ("query_only=ON",) if read_only else ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" event below decides how transactions start
        cur = dbapi_conn.cursor()
        for pragma in pragmas:
            cur.execute(f"PRAGMA {pragma}")
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("gapforge_write") else "BEGIN")

    return engine


def make_engine(raw_url: str, *, read_only: bool = False, must_exist: bool = False) -> Engine:
    """Create the engine for a store URL and make sure the schema exists; StoreError if not possible.

    read_only: an engine that can only read (SQLite `query_only`, PostgreSQL read-only
    transactions) and creates nothing; a missing SQLite file or an empty database raises
    NoStore (the viewer, `gapforge ui`, shows that as a page). must_exist: a missing SQLite file raises NoStore
    instead of being created (`gapforge run --resume`)."""
    url = parse_url(raw_url)
    shown = url.render_as_string(hide_password=True)
    try:
        if url.get_backend_name() == "sqlite":
            engine = _sqlite_engine(url, read_only=read_only, must_exist=must_exist)
        else:
            args: dict[str, Any] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
            if read_only:
                args["options"] = "-c default_transaction_read_only=on"
            engine = create_engine(url, pool_pre_ping=True, connect_args=args)
    except (ImportError, exc.NoSuchModuleError) as e:
        raise StoreError(
            f"no database driver for {shown!r} ({e}): use postgresql+psycopg:// and install gapforge[postgres]"
        ) from None
    try:
        if read_only:
            if not inspect(engine).has_table("store_meta"):
                engine.dispose()
                raise NoStore(
                    f"store {shown!r} is empty (no gapforge tables yet): start a run (`gapforge run` or `gapforge demo`)"
                )
            return engine
        # Tables missing: create them in a write transaction from the start (a deferred one that finds
        # tables missing while another process is creating them cannot upgrade to a writer and fails
        # at once, "database is locked"). All there: no write at all, so a store whose write lock a
        # stuck process holds still opens, and its lease can name that process (store/leases.py).
        if not set(Base.metadata.tables) <= set(inspect(engine).get_table_names()):
            Base.metadata.create_all(engine.execution_options(gapforge_write=True))
        _add_indexes(engine)
    except exc.DBAPIError as e:  # OperationalError, DatabaseError ("file is not a database"), ...
        engine.dispose()
        raise _translate(e, url, "the store's tables") or StoreError(
            f"cannot open store {shown!r}: {_reason(e)}; {_open_hint(url, _reason(e))}"
        ) from None
    return engine


def _reason(e: exc.DBAPIError) -> str:
    return str(e.orig).strip().splitlines()[0] if e.orig else str(e).splitlines()[0]


def where(url: URL) -> str:
    """The store's file (SQLite) or its server, as an error names it."""
    if url.get_backend_name() == "sqlite":
        return str(Path(url.database or "").expanduser())
    return f"the PostgreSQL server of {url.render_as_string(hide_password=True)}"


def _translate(e: exc.DBAPIError, url: URL, what: str) -> StoreError | None:
    """DiskFull / StoreDamaged for a database error that is one, else None (the caller re-raises it as it is)."""
    if is_disk_full(e):
        return DiskFull(where(url), what)
    if url.get_backend_name() == "sqlite" and is_damaged(e) and _began_as_sqlite(Path(where(url)), e):
        return StoreDamaged(damaged_message(where(url), _reason(e)))
    return None  # e.g. a text file at the store's path: not a store at all (make_engine's hint says so)


def _began_as_sqlite(path: Path, e: exc.DBAPIError) -> bool:
    """Whether the damaged file is a SQLite store (its header as read at this process's first open: reading it
    again here would drop the locks our connections hold); for a path never opened here, SQLite's own word:
    only a file whose header it accepted is "malformed"."""
    began = _HEADERS.get(str(path.resolve()))
    return began if began is not None else "malformed" in _reason(e).lower()


def _sqlite_magic(path: Path) -> bool:
    """Whether the file begins as a SQLite file does (or is cut inside those 16 bytes), or has no bytes yet."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return b"SQLite format 3\x00".startswith(head)


def _add_indexes(engine: Engine) -> None:
    """Indexes declared after a store was made (create_all adds none to an existing table)."""
    found = inspect(engine)
    for table in Base.metadata.sorted_tables:
        have = {ix["name"] for ix in found.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in have:
                index.create(engine.execution_options(gapforge_write=True), checkfirst=True)


def _open_hint(url: URL, reason: str) -> str:
    """What to fix, for the backend and the failure at hand."""
    if url.get_backend_name() != "sqlite":
        return "check that the server runs and the URL is right"
    low = reason.lower()
    if "not a database" in low or "malformed" in low:
        return "that file is not a gapforge SQLite store: point store.url at a new file or the right one"
    if "readonly" in low or "read-only" in low or "unable to open" in low or "permission" in low:
        return "check that the file and its directory are writable by you"
    return "check the file at that path (disk full? another program holding it?)"


def given(**eq: Any) -> dict[str, Any]:
    """The keywords whose value is not None (a query's optional `column == value` filters)."""
    return {k: v for k, v in eq.items() if v is not None}


def unknown_run(run_id: str) -> StoreError:
    return StoreError(f"unknown run {run_id!r} in this store: check the run id and store.url")


def no_capability(run_id: str, name: str | None) -> str:
    return f"unknown capability {name!r} in run {run_id!r}: store it with put_capability first"


class StoreBase:
    """Sessions and upserts shared by the query mixins. One short session per call."""

    def __init__(self, url: str, *, read_only: bool = False, must_exist: bool = False) -> None:
        self.engine = make_engine(url, read_only=read_only, must_exist=must_exist)
        self.dialect = self.engine.dialect.name
        self.store_key = self.engine.url.render_as_string(hide_password=True)  # which database (fences are per store)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(self.engine.execution_options(gapforge_write=True), expire_on_commit=False)
        # SQLite has one writer at a time. Threads of this process queue on a lock instead of
        # meeting in SQLite's busy handler, which sleeps in growing steps (up to 100 ms) while
        # holding a worker thread; other processes still wait on the busy timeout.
        self._write_lock = threading.RLock() if self.dialect == "sqlite" else contextlib.nullcontext()

    @contextmanager
    def _read(self) -> Iterator[Session]:
        try:
            with self._reader() as session, session.begin():
                yield session
        except exc.DBAPIError as e:  # a file truncated under a reader: one line naming it, not a traceback
            translated = _translate(e, self.engine.url, "a read's temporary data")
            if translated is None:
                raise
            raise translated from None

    @contextmanager
    def _write(self, run_id: str | None = None, missing: str | None = None) -> Iterator[Session]:
        """A write transaction. A failed foreign key becomes StoreError: unknown run, else `missing`.
        A write of a run this process leased is fenced: store.fencing.LeaseLost if the lease was taken over."""
        try:
            with self._write_lock, self._writer() as session, session.begin():
                if run_id is not None:
                    self._fence(session, run_id)
                yield session
        except exc.IntegrityError:
            if run_id is not None and not self._run_exists(run_id):
                raise unknown_run(run_id) from None
            if missing is not None:
                raise StoreError(missing) from None
            raise
        except exc.DBAPIError as e:  # a full disk rolls the whole transaction back: nothing of it is stored
            translated = _translate(e, self.engine.url, f"run {run_id}'s rows" if run_id else "the store")
            if translated is None:
                raise
            raise translated from None

    def _fence(self, session: Session, run_id: str) -> None:
        fencing.check(session, self.store_key, run_id, postgres=self.dialect == "postgresql")

    def _run_exists(self, run_id: str) -> bool:
        with self._read() as session:
            return session.get(Run, run_id) is not None

    def _require_run(self, session: Session, run_id: str) -> Run:
        run = session.get(Run, run_id)
        if run is None:
            raise unknown_run(run_id)
        return run

    def _rows(self, row: type[R], stmt: Any, run_id: str | None = None) -> list[R]:
        """`stmt`'s ORM objects as detached rows; StoreError when `run_id` is given and unknown."""
        with self._read() as session:
            if run_id is not None:
                self._require_run(session, run_id)
            return [to_row(row, x) for x in session.scalars(stmt)]

    def _list(self, row: type[R], model: Any, run_id: str, order: Sequence[Any], **eq: Any) -> list[R]:
        """A run's rows of `model` in `order`, where each column of `eq` whose value is not None equals it."""
        stmt = select(model).filter_by(run_id=run_id, **given(**eq))
        return self._rows(row, stmt.order_by(*order), run_id)

    def _one(self, row: type[R], model: Any, run_id: str, **key: Any) -> R | None:
        """The run's row of `model` with this unique key, or None."""
        return next(iter(self._rows(row, select(model).filter_by(run_id=run_id, **key), run_id)), None)

    def _put(
        self, row: type[R], model: Any, values: dict[str, Any], key: Sequence[str], missing: str | None = None
    ) -> R:
        """Upsert `values` (a run's row) on `key` and return the stored row (see `_upsert`)."""
        with self._write(values["run_id"], missing) as session:
            return to_row(row, self._upsert(session, model, values, key))

    def _insert(self, model: type[Base]) -> Any:
        return (pg_insert if self.dialect == "postgresql" else sqlite_insert)(model)

    def _upsert(self, session: Session, model: type[Base], values: dict[str, Any], key: Sequence[str]) -> Any:
        """INSERT ... ON CONFLICT (key) DO UPDATE the other given columns; returns the live ORM object."""
        stmt = self._insert(model).values(**values)
        updates: dict[str, Any] = {c: stmt.excluded[c] for c in values if c not in key}
        if hasattr(model, "updated_at"):
            updates["updated_at"] = utcnow()
        stmt = stmt.on_conflict_do_update(index_elements=list(key), set_=updates).returning(model)
        return session.scalars(stmt, execution_options={"populate_existing": True}).one()

    def _insert_or_get_id(self, session: Session, model: Any, values: dict[str, Any], key: Sequence[str]) -> int:
        """INSERT ... ON CONFLICT DO NOTHING; the id of the new row or of the row already there."""
        stmt = self._insert(model).values(**values).on_conflict_do_nothing(index_elements=list(key)).returning(model.id)
        new_id = session.scalars(stmt).first()
        if new_id is not None:
            return int(new_id)
        where = [getattr(model, k) == values[k] for k in key]
        return int(session.scalars(select(model.id).where(*where)).one())

    def _check_version(self, found: str | None, wording: str) -> None:
        if found != SCHEMA_VERSION:
            raise StoreError(f"store {self.store_key!r} has schema version {found}, this gapforge {wording}")

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
