"""Fenced leases: once another process takes a run over (its lease's epoch goes up), every write
of the run by the old holder -- through any Store object of that process, child runs included --
is refused with LeaseLost; its renewal fails, its release leaves the new lease alone; a holder
paused past the ttl (SIGSTOP) stops once resumed, writing nothing after the takeover; and a
holder stopped inside a write gets named by a takeover, which no longer waits for it forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from gapforge.store import Store
from gapforge.store.errors import StoreError
from gapforge.store.fencing import LeaseLost
from gapforge.store.models import SCHEMA_VERSION, RunLease, utcnow

ROOT = Path(__file__).parents[2]
TAKE = """
import sys
import gapforge.store.engine, gapforge.store.leases  # noqa: F401 (loads the submodule that the name below reaches)
from gapforge import store
if len(sys.argv) > 3:  # a short lock wait, so a test need not wait the default 30 s
    store.engine.SQLITE_BUSY_TIMEOUT_S = store.leases.LOCK_WAIT_S = float(sys.argv[3])
from gapforge.store import Store
s = Store(sys.argv[1])
print(s.acquire_lease(sys.argv[2], "takeover"), flush=True)
"""
WRITER = """
import os, signal, sys, time
from gapforge.store import Store
s = Store(sys.argv[1])
run = sys.argv[2]
with s.lease(run, "writer", ttl_s=float(sys.argv[3])):
    print("held", flush=True)
    i = 0
    while True:  # one episode per 20 ms; after the 5th it pauses itself, between two writes
        s.put_episode(run, "shop", f"t{i}", 0, policy="writer", messages=[], reward=0.0, success=False, components={},
                      termination="done", error=None, turns=0, timings={})
        i += 1
        if i == 5:  # paused inside a write, it would hold the lease row's share lock that a takeover waits for
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(0.02)
"""
STUCK = """
import os, signal, sys
from gapforge.store import Store
s = Store(sys.argv[1])
with s.lease(sys.argv[2], "writer", ttl_s=float(sys.argv[3])), s._write(sys.argv[2]):
    print("in a write", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # stopped inside a write: PostgreSQL share-locks the lease row, SQLite the store
"""


def _age_out(store: Store, run_id: str) -> None:
    with store._write() as session:  # as if this holder had been paused past its ttl
        session.execute(update(RunLease).values(heartbeat_at=utcnow() - timedelta(seconds=3600)))


def _take_over(url: str, run_id: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", TAKE, url, run_id], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return int(out.stdout.strip())


def _episode(store: Store, run_id: str, task: str) -> None:
    store.put_episode(
        run_id,
        "shop",
        task,
        0,
        policy="p",
        messages=[],
        reward=0.0,
        success=False,
        components={},
        termination="done",
        error=None,
        turns=0,
        timings={},
    )


def test_a_taken_over_holder_cannot_write_the_run(store: Store, store_url: str) -> None:
    run_id = store.create_run("rollouts", {})
    child = store.create_run("rollouts", {}, run_id=f"{run_id}.eval.base")
    assert store.acquire_lease(run_id, "collect") == 1
    _episode(store, run_id, "before")  # our lease: the write goes through
    other = Store(store_url)  # another Store object of this process: fenced all the same
    _age_out(store, run_id)
    assert _take_over(store_url, run_id) == 2  # another process, epoch + 1
    for write in (
        lambda: _episode(store, run_id, "after"),
        lambda: _episode(other, run_id, "after2"),
        lambda: store.set_run_status(run_id, "failed"),
        lambda: _episode(store, child, "child"),
    ):
        with pytest.raises(LeaseLost, match=rf"lost run '{run_id}' to `takeover` \(pid \d+"):
            write()
    assert not store.renew_lease(run_id)
    store.release_lease(run_id)  # not ours any more: the new holder keeps it
    assert store.lease_holder(run_id).startswith("takeover")
    assert [e.task_id for e in store.episodes(run_id)] == ["before"] and store.get_run(run_id).status == "created"
    other.close()


def test_a_holder_paused_past_the_ttl_stops_once_resumed_and_writes_nothing_after(store: Store, store_url: str) -> None:
    run_id = store.create_run("rollouts", {})
    ttl = 1.0
    writer = _stopped_holder(WRITER, "held", store, store_url, run_id, ttl)
    try:
        before = len(store.episodes(run_id))
        assert _take_over(store_url, run_id) == 2
        os.kill(writer.pid, signal.SIGCONT)
        _, err = writer.communicate(timeout=30)  # a hang guard, not a speed bound
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode != 0 and f"lost run '{run_id}' to `takeover`" in err, err
    assert len(store.episodes(run_id)) == before  # nothing written after the takeover
    assert store.lease_holder(run_id).startswith("takeover")


def test_a_takeover_names_a_holder_stuck_inside_a_write_instead_of_waiting_for_it(store: Store, store_url: str) -> None:
    run_id = store.create_run("rollouts", {})
    writer = _stopped_holder(STUCK, "in a write", store, store_url, run_id, 1.0)
    try:
        # timeout: a hang guard (waiting for the stuck writer would outlast it), not a speed bound
        out = subprocess.run(
            [sys.executable, "-c", TAKE, store_url, run_id, "1.0"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert out.returncode != 0, out.stdout
        last = out.stderr.strip().splitlines()[-1]
        assert (
            last.startswith("gapforge.store.leases.RunBusy: ") and "`writer`" in last and "stuck inside a write" in last
        ), last
        assert f"kill {writer.pid} " in last, last
        writer.kill()
        writer.wait(timeout=30)
        assert _take_over(store_url, run_id) == 1  # stuck process killed: its lease is reaped and the run taken afresh
    finally:
        if writer.poll() is None:
            writer.kill()
    assert store.lease_holder(run_id).startswith("takeover")


def _stopped_holder(script: str, says: str, store: Store, store_url: str, run_id: str, ttl: float) -> subprocess.Popen:
    """A lease holder running `script` that printed `says`, then stopped itself (SIGSTOP), and whose heartbeat has gone
    stale past its ttl. The caller kills it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", script, store_url, run_id, str(ttl)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline().strip() == says
        deadline = time.monotonic() + 30
        while not _stopped(holder.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        while (
            _lease_age(store, run_id) <= ttl and time.monotonic() < deadline
        ):  # the paused holder's heartbeat goes stale
            time.sleep(0.1)
    except BaseException:
        holder.kill()
        raise
    return holder


def _stopped(pid: int) -> bool:
    """The process is stopped (state T in /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def _lease_age(store: Store, run_id: str) -> float:
    with store._read() as session:
        row = session.get(RunLease, run_id)
        beat = row.heartbeat_at if row.heartbeat_at.tzinfo else row.heartbeat_at.replace(tzinfo=utcnow().tzinfo)
        return (utcnow() - beat).total_seconds()


def test_a_store_made_by_an_older_gapforge_is_refused_in_one_line_naming_its_version(sqlite_url: str) -> None:
    """No migrations: a store of schema version 2 (before fencing, with names since retired) is refused, not adapted."""
    from sqlalchemy import text

    with Store(sqlite_url) as old:
        old.create_run("rollouts", {})
        with old.engine.begin() as conn:
            conn.execute(text("ALTER TABLE run_leases DROP COLUMN epoch"))  # as version 2 made it
            conn.execute(text("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'"))
    with pytest.raises(StoreError) as refused:
        Store(sqlite_url)
    message = str(refused.value)
    assert "has schema version 2" in message and f"needs {SCHEMA_VERSION}" in message and "\n" not in message
