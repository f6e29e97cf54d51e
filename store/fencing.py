"""Fencing tokens for run leases: a process that lost a run can no longer write to it.

Every acquisition of a run's lease by another process raises the lease's `epoch`. The holder registers
(store, run) -> epoch here; from then on every write of that run (or of its child runs `RUN.<suffix>`, e.g.
evaluation runs) by ANY Store object of this process checks, inside the write's own transaction, that the lease
row still carries this process's holder id and epoch. A stale holder (paused past the ttl: SIGSTOP, a VM pause, a
long GC) gets `LeaseLost` instead of a write, so two processes never both write a run. On SQLite the check and the
write share one `BEGIN IMMEDIATE` transaction; on PostgreSQL the lease row is read `FOR SHARE`, which a takeover's
`FOR UPDATE` waits for. Writes of runs this process never leased are not fenced.
"""

from __future__ import annotations

import threading

from sqlalchemy import select
from sqlalchemy.orm import Session

from gapforge.store.errors import StoreError
from gapforge.store.models import RunLease

_fences: dict[tuple[str, str], tuple[str, int]] = {}  # (store key, run id) -> (holder id, epoch)
_lock = threading.Lock()


class LeaseLost(StoreError):
    """This process's lease on a run was taken over by another process; the message names it."""


def hold(store_key: str, run_id: str, holder: str, epoch: int) -> None:
    with _lock:
        _fences[(store_key, run_id)] = (holder, epoch)


def drop(store_key: str, run_id: str) -> None:
    with _lock:
        _fences.pop((store_key, run_id), None)


def held(store_key: str, run_id: str) -> tuple[str, int] | None:
    with _lock:
        return _fences.get((store_key, run_id))


def _fence_for(store_key: str, run_id: str) -> tuple[str, tuple[str, int]] | None:
    """The leased run whose fence covers `run_id` (itself or its parent), with its (holder, epoch)."""
    with _lock:
        if not _fences:
            return None
        for (key, leased), token in _fences.items():
            if key == store_key and (run_id == leased or run_id.startswith(leased + ".")):
                return leased, token
    return None


def lost_message(run_id: str, row: RunLease | None) -> str:
    who = f"`{row.command}` (pid {row.pid} on {row.host})" if row is not None else "nobody (the lease was released)"
    return (
        f"this process lost run {run_id!r} to {who}: its lease was taken over while this process was not renewing it "
        "(paused past the lease ttl?); it stopped, and that process goes on with the run"
    )


def check(session: Session, store_key: str, run_id: str, *, postgres: bool) -> None:
    """Raise LeaseLost unless this process still holds the lease that covers `run_id` (no-op when none)."""
    found = _fence_for(store_key, run_id)
    if found is None:
        return
    leased, (holder, epoch) = found
    stmt = select(RunLease).where(RunLease.run_id == leased)
    if postgres:
        stmt = stmt.with_for_update(read=True)
    row = session.scalars(stmt).first()
    if row is None or row.holder != holder or row.epoch != epoch:
        raise LeaseLost(lost_message(leased, row))
