"""Run leases: one process works on a run at a time, on SQLite and PostgreSQL.

    with store.lease(run_id, "rollouts collect"):
        ...  # a second process asking for the same run gets RunBusy naming the holder

The holder is identified by host, pid and the process's start time (so a
recycled pid is not the holder). A lease is taken over when its holder is gone
(same host: the process no longer exists) or its heartbeat is older than its
ttl (another host: a background thread refreshes it every ttl/4). A SIGKILLed
holder therefore never blocks a resume on the same host, and blocks one on
another host for at most ttl seconds.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import delete, exc, select

from store.engine import StoreBase, unknown_run
from store.errors import StoreError
from store.models import Run, RunLease, utcnow

DEFAULT_TTL_S = 120.0


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


def _age_s(when: datetime) -> float:
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return (datetime.now(UTC) - when).total_seconds()


class LeaseQueries(StoreBase):
    def acquire_lease(self, run_id: str, command: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        """Take the run's lease for this process, or raise RunBusy naming who holds it."""
        me = holder_id()
        for _ in range(3):  # PostgreSQL: two first inserts race on the primary key; the loser retries
            try:
                with self._write(run_id) as session:
                    if session.get(Run, run_id) is None:
                        raise unknown_run(run_id)
                    row = session.scalars(select(RunLease).where(RunLease.run_id == run_id).with_for_update()).first()
                    now = utcnow()
                    if row is None:
                        session.add(RunLease(run_id=run_id, holder=me, host=socket.gethostname(), pid=os.getpid(), command=command, ttl_s=ttl_s, acquired_at=now, heartbeat_at=now))
                        return
                    if row.holder != me and _holder_alive(row.holder) and _age_s(row.heartbeat_at) < row.ttl_s:
                        since = row.acquired_at if row.acquired_at.tzinfo else row.acquired_at.replace(tzinfo=UTC)
                        raise RunBusy(
                            f"run {run_id!r} is in use by `{row.command}` (pid {row.pid} on {row.host}, since {since:%Y-%m-%d %H:%M:%S} UTC): "
                            "wait for it to finish or stop that process, then resume"
                        )
                    row.holder, row.host, row.pid, row.command, row.ttl_s = me, socket.gethostname(), os.getpid(), command, ttl_s
                    row.acquired_at = row.heartbeat_at = now
                    return
            except exc.IntegrityError:
                continue
        raise StoreError(f"could not take the lease of run {run_id!r} (too much contention): try again")

    def renew_lease(self, run_id: str) -> bool:
        """Refresh this process's heartbeat; False when the lease is no longer ours."""
        with self._write() as session:
            row = session.get(RunLease, run_id)
            if row is None or row.holder != holder_id():
                return False
            row.heartbeat_at = utcnow()
            return True

    def release_lease(self, run_id: str) -> None:
        with self._write() as session:
            session.execute(delete(RunLease).where(RunLease.run_id == run_id, RunLease.holder == holder_id()))

    def lease_holder(self, run_id: str) -> str | None:
        with self._read() as session:
            row = session.get(RunLease, run_id)
            return None if row is None else f"{row.command} (pid {row.pid} on {row.host})"

    @contextmanager
    def lease(self, run_id: str, command: str, *, ttl_s: float = DEFAULT_TTL_S) -> Iterator[None]:
        """Hold the run's lease for the block, renewing it in the background."""
        self.acquire_lease(run_id, command, ttl_s=ttl_s)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(ttl_s / 4):
                try:
                    self.renew_lease(run_id)
                except Exception:  # noqa: BLE001, S112 - a missed beat only shortens the lease's life
                    continue

        thread = threading.Thread(target=beat, name=f"gapforge-lease-{run_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
            self.release_lease(run_id)
