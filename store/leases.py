"""Run leases: one process works on a run at a time, on SQLite and PostgreSQL.

    with store.lease(run_id, "rollouts collect"):
        ...  # a second process asking for the same run gets RunBusy naming the holder

The holder is host, pid and the process's start time (a recycled pid is not the holder). A lease is taken over when
its holder is gone (same host: the process no longer exists) or its heartbeat, refreshed every ttl/4 by a background
thread, is older than its ttl (any host): a SIGKILLed holder never blocks a resume on its host, and one on another
host for at most ttl seconds.

Leases are fenced (store/fencing.py): a takeover raises the lease's epoch and every write of the run checks it, so
a holder paused past the ttl (SIGSTOP, a VM pause) cannot write again; its heartbeat finds the lease gone within
one beat and stops its work with one line (LeaseLost).

A holder stopped inside a write (SIGSTOP, a hung client) keeps its transaction open: on PostgreSQL its share lock on
the lease row, on SQLite the store's write lock. A takeover waits for that lock at most `lock_timeout_s` (default
LOCK_WAIT_S; SQLite: the busy timeout), then gets RunBusy naming the stuck process to stop.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, exc, select, text

from gapforge.store import fencing
from gapforge.store.engine import StoreBase
from gapforge.store.errors import DiskFull, StoreError
from gapforge.store.fencing import LeaseLost
from gapforge.store.models import Run, RunLease, utcnow

DEFAULT_TTL_S = 120.0
# PostgreSQL: how long a takeover waits, by default, for a lease row a stuck holder's write still locks
LOCK_WAIT_S = 30.0
LOST_SIGNAL = signal.SIGUSR1  # how the heartbeat thread stops the main thread of a holder that lost its run


class RunBusy(StoreError):
    """Another live process holds the run's lease; the message names it."""


def _start_time(pid: int) -> str:
    try:
        stat = open(f"/proc/{pid}/stat").read()
        return stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return ""


def holder_id(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _holder_alive(holder: str) -> bool:
    """False when the holder ran on this host and that process (pid + start time) is gone."""
    host, _, rest = holder.partition(":")
    pid_s, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid_s.isdigit():
        return True  # another host: only the heartbeat can tell
    try:
        os.kill(int(pid_s), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not started or _start_time(int(pid_s)) in ("", started)


def _in_use(row: RunLease) -> bool:
    """The lease's holder is alive and renewed within its ttl: nobody else may take the run."""
    return _holder_alive(row.holder) and _age_s(row.heartbeat_at) < row.ttl_s


def _busy_message(run_id: str, row: RunLease) -> str:
    since = row.acquired_at if row.acquired_at.tzinfo else row.acquired_at.replace(tzinfo=UTC)
    return (
        f"run {run_id!r} is in use by `{row.command}` (pid {row.pid} on {row.host}, since {since:%Y-%m-%d %H:%M:%S} UTC): "
        "wait for it to finish or stop that process, then resume"
    )


def _lock_wait_expired(e: exc.OperationalError) -> bool:
    """PostgreSQL's lock_timeout (SQLSTATE 55P03) or SQLite's busy timeout ran out."""
    return getattr(e.orig, "sqlstate", None) == "55P03" or "database is locked" in str(e.orig)


def _age_s(when: datetime) -> float:
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return (datetime.now(UTC) - when).total_seconds()


class LeaseQueries(StoreBase):
    def acquire_lease(
        self, run_id: str, command: str, *, ttl_s: float = DEFAULT_TTL_S, lock_timeout_s: float | None = None
    ) -> int:
        """Take the run's lease for this process and return its epoch (the fencing token), or raise
        RunBusy naming who holds it. A takeover from another holder raises the epoch by one.
        `lock_timeout_s` (PostgreSQL; None: LOCK_WAIT_S): how long to wait for a lease row a stuck holder's write locks."""
        me = holder_id()
        wait_ms = int((LOCK_WAIT_S if lock_timeout_s is None else lock_timeout_s) * 1000)
        for _ in range(3):  # PostgreSQL: two first inserts race on the primary key; the loser retries
            try:
                with self._write() as session:  # not fenced: this is how a fence is (re)gained
                    if self.dialect == "postgresql":
                        session.execute(text(f"SET LOCAL lock_timeout = '{wait_ms}ms'"))
                    self._require_run(session, run_id)
                    row = session.scalars(select(RunLease).where(RunLease.run_id == run_id).with_for_update()).first()
                    if row is not None and row.holder != me and _in_use(row):
                        raise RunBusy(_busy_message(run_id, row))
                    epoch = 1 if row is None else row.epoch if row.holder == me else row.epoch + 1
                    now = utcnow()
                    held = {"holder": me, "host": socket.gethostname(), "pid": os.getpid(), "command": command}
                    held.update(ttl_s=ttl_s, acquired_at=now, heartbeat_at=now, epoch=epoch)
                    if row is None:
                        session.add(RunLease(run_id=run_id, **held))
                    else:
                        for name, value in held.items():
                            setattr(row, name, value)
                fencing.hold(self.store_key, run_id, me, epoch)
                return epoch
            except exc.IntegrityError:
                continue
            except exc.OperationalError as e:
                if not _lock_wait_expired(e):
                    raise
                raise RunBusy(self._stuck_message(run_id, me)) from None
        raise StoreError(f"could not take the lease of run {run_id!r} (too much contention): try again")

    def _stuck_message(self, run_id: str, me: str) -> str:
        """Why a takeover's lock wait ran out: the lease's holder (read without a lock) is stuck inside a write."""
        with self._read() as session:
            row = session.get(RunLease, run_id)
        if row is None or row.holder == me:
            return (
                f"run {run_id!r}: the store stayed locked by another process's write for longer than the lock wait "
                "(a process stopped or hung inside a write?): find and stop it, then resume"
            )
        if _in_use(row):
            return _busy_message(run_id, row)
        locked = "the whole SQLite store" if self.dialect == "sqlite" else "the run's lease row"
        return (
            f"run {run_id!r} is held by `{row.command}` (pid {row.pid} on {row.host}), which is stuck inside a write "
            f"(stopped or hung: no lease renewal for {_age_s(row.heartbeat_at):.0f} s) and keeps {locked} locked: "
            f"stop that process (kill {row.pid} on {row.host}), then resume"
        )

    def renew_lease(self, run_id: str) -> bool:
        """Refresh this process's heartbeat; False when the lease is no longer ours (taken over: another holder
        or another epoch)."""
        token = fencing.held(self.store_key, run_id)
        with self._write() as session:
            row = session.get(RunLease, run_id)
            if row is None or row.holder != holder_id() or (token is not None and row.epoch != token[1]):
                return False
            row.heartbeat_at = utcnow()
            return True

    def release_lease(self, run_id: str) -> None:
        """Give the lease back (only if it is still ours: a taken-over lease is the new holder's)."""
        token = fencing.held(self.store_key, run_id)
        with self._write() as session:
            mine = [RunLease.run_id == run_id, RunLease.holder == holder_id()]
            if token is not None:
                mine.append(RunLease.epoch == token[1])
            session.execute(delete(RunLease).where(*mine))
        fencing.drop(self.store_key, run_id)

    def reap_dead_leases(self) -> list[str]:
        """Leases whose holder ran on this host and is gone (SIGKILLed, crashed) are removed, and a run such a
        holder left `running` becomes `interrupted`, so `runs` / `show` tell the truth before any resume.
        Returns the runs reaped. Live holders, and other hosts' holders, are left alone (their ttl decides)."""
        with self._read() as session:
            rows = [(r.run_id, r.holder, r.epoch) for r in session.scalars(select(RunLease))]
        dead = [(run_id, holder, epoch) for run_id, holder, epoch in rows if not _holder_alive(holder)]
        reaped = []
        for run_id, holder, epoch in dead:
            with self._write() as session:
                gone = session.execute(
                    delete(RunLease).where(
                        RunLease.run_id == run_id, RunLease.holder == holder, RunLease.epoch == epoch
                    )
                )
                if gone.rowcount:
                    run = session.get(Run, run_id)
                    if run is not None and run.status == "running":
                        run.status, run.updated_at = "interrupted", utcnow()
                    reaped.append(run_id)
        return reaped

    def lease_holder(self, run_id: str) -> str | None:
        with self._read() as session:
            row = session.get(RunLease, run_id)
            return None if row is None else f"{row.command} (pid {row.pid} on {row.host})"

    def _lost(self, run_id: str, unrenewed_s: float | None) -> str:
        try:
            with self._read() as session:
                row = session.get(RunLease, run_id)
                message = fencing.lost_message(run_id, row)
        except Exception:  # noqa: BLE001 - the store itself is unreachable: say that
            message = f"this process lost run {run_id!r}: the store did not answer its lease renewals; it stopped"
        if unrenewed_s is not None:
            message += f" (no renewal for {unrenewed_s:.0f} s)"
        return message

    @contextmanager
    def lease(
        self, run_id: str, command: str, *, ttl_s: float = DEFAULT_TTL_S, lock_timeout_s: float | None = None
    ) -> Iterator[int]:
        """Hold the run's lease for the block (yields its epoch), renewing it every ttl/4 in the background.

        A renewal that finds the lease taken over (or no renewal for a whole ttl) means another process
        may be working on the run: the holder stops within that heartbeat. Entered on the main thread,
        the block gets store.fencing.LeaseLost raised into it (through `LOST_SIGNAL`, as Ctrl-C would
        be); on any thread every later write of the run is refused (fenced) with the same error."""
        self.acquire_lease(run_id, command, ttl_s=ttl_s, lock_timeout_s=lock_timeout_s)
        stop = threading.Event()
        lost: list[str] = []
        on_main = threading.current_thread() is threading.main_thread()
        previous: Any = None
        if on_main:

            def on_lost(signum: int, frame: Any) -> None:
                if lost:
                    raise LeaseLost(lost[0])
                if callable(previous):
                    previous(signum, frame)

            previous = signal.signal(LOST_SIGNAL, on_lost)

        def beat() -> None:
            last_ok = time.monotonic()
            while not stop.wait(ttl_s / 4):
                try:
                    ok: bool | None = self.renew_lease(run_id)
                except Exception:  # noqa: BLE001 - a missed beat shortens the lease's life; a whole ttl of them ends it
                    ok = None
                if ok:
                    last_ok = time.monotonic()
                    continue
                silent = time.monotonic() - last_ok
                if ok is False or silent > ttl_s:
                    lost.append(self._lost(run_id, None if ok is False else silent))
                    if on_main and not stop.is_set():  # a real signal: it wakes a main thread blocked in select()
                        signal.pthread_kill(threading.main_thread().ident, LOST_SIGNAL)  # type: ignore[arg-type]
                    return

        thread = threading.Thread(target=beat, name=f"gapforge-lease-{run_id}", daemon=True)
        thread.start()
        try:
            yield fencing.held(self.store_key, run_id)[1]  # type: ignore[index]
        finally:
            stop.set()
            thread.join(timeout=5)
            if on_main:
                signal.signal(LOST_SIGNAL, previous if previous is not None else signal.SIG_DFL)
            if lost:
                fencing.drop(self.store_key, run_id)  # nothing of ours to release: the lease is the new holder's
            else:
                try:
                    self.release_lease(run_id)
                except DiskFull:  # never replaces the error on its way up; the row stays, and once this process
                    # exits it is a dead holder's (reaped on the next open; another host: its ttl)
                    fencing.drop(self.store_key, run_id)
