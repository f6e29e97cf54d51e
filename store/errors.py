"""Errors at the store boundary: each a `gapforge.faults.StoreFault` (one line, exit 2), but a full
disk, which is resumable (`DiskFull`: exit 3)."""

from __future__ import annotations

from gapforge.faults import Resumable, StoreFault


class StoreError(StoreFault):
    """A store problem the user can fix (bad URL, unreachable server, unknown run id).

    The message is one line and says what to fix; the CLI prints it and exits 2.
    """


class NoStore(StoreError):
    """A read-only open found no store there yet (no SQLite file, or a database without gapforge's tables)."""


class StoreDamaged(StoreError):
    """The store's file is truncated or overwritten ("database disk image is malformed", "file is not a
    database"): found at open or in the middle of a read. One line naming the file and what to do; exit 2."""


class DiskFull(Resumable, StoreError):
    """No space left where a write went (the store, the checkpoints, an adapter, a workspace file). What was
    committed before is kept and nothing half-written is read back as good: free space, then resume. Like
    agents.errors.IncompleteStage (which the store may not import) an infrastructure stop (gapforge.faults.Resumable):
    one line, exit 3."""

    infrastructure = True
    exit_code = 3
    resume_wording = (", then resume with `{}`", ", then resume")

    def __init__(self, path: str, what: str, *, resume: str | None = None) -> None:
        self.path, self.what = path, what
        summary = f"no space left on the disk holding {path} (writing {what}); what was stored before is kept: free space there"
        super().__init__(self._resumable(summary, resume))


DISK_FULL_MARKERS = (
    "no space left on device",
    "database or disk is full",
    "disk quota exceeded",
    "could not extend file",
)


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) is a full disk: ENOSPC / EDQUOT, SQLite's SQLITE_FULL,
    PostgreSQL's disk_full (SQLSTATE 53100), or a library's message quoting one of them (safetensors, torch)."""
    import errno

    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)):
            return True
        if getattr(e, "sqlstate", None) == "53100" or getattr(e, "sqlite_errorname", None) == "SQLITE_FULL":
            return True
        if any(m in str(e).lower() for m in DISK_FULL_MARKERS):
            return True
        e = getattr(e, "orig", None) or e.__cause__ or e.__context__
    return False


def is_damaged(error: BaseException) -> bool:
    """Whether a database error means a truncated or overwritten SQLite file (SQLITE_CORRUPT / SQLITE_NOTADB)."""
    orig = getattr(error, "orig", None) or error
    if getattr(orig, "sqlite_errorname", None) in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return True
    text = str(orig).lower()
    return "malformed" in text or "not a database" in text


def damaged_message(path: str, reason: str) -> str:
    return (
        f"the store file {path} is damaged ({reason}: truncated or overwritten?): restore it from a backup, or salvage "
        f"what it holds with `sqlite3 {path} .recover | sqlite3 NEW.db` and point store.url at NEW.db"
    )
