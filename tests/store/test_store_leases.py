"""Run leases: one process per run on SQLite and PostgreSQL; a live holder is named, a dead
one (SIGKILLed, same host) or one whose heartbeat stopped (another host) is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from gapforge.store import Store
from gapforge.store.leases import RunBusy
from gapforge.store.models import RunLease, utcnow

ROOT = Path(__file__).parents[2]
HOLD = """
import os, sys, time
from gapforge.store import Store
store = Store(sys.argv[1])
store.acquire_lease(sys.argv[2], "rollouts collect")
print("held", flush=True)
if sys.argv[3] == "die":
    os._exit(0)  # like SIGKILL: no release
sys.stdin.read()
"""


def _holder(url: str, run_id: str, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, url, run_id, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_named_and_a_dead_one_is_taken_over(store: Store, store_url: str) -> None:
    run_id = store.create_run("rollouts", {})
    live = _holder(store_url, run_id, "hold")
    try:
        with pytest.raises(RunBusy, match=rf"in use by `rollouts collect` \(pid {live.pid} on "):
            store.acquire_lease(run_id, "rollouts collect")
    finally:
        live.communicate("")
    dead = _holder(store_url, run_id, "die")
    dead.wait()
    with store.lease(run_id, "rollouts collect"):  # the holder is gone: taken over
        assert store.lease_holder(run_id) == f"rollouts collect (pid {os.getpid()} on {os.uname().nodename})"
        store.acquire_lease(run_id, "again")  # re-entrant for the same process
    assert store.lease_holder(run_id) is None  # released


def test_another_hosts_lease_expires_with_its_heartbeat(store: Store) -> None:
    run_id = store.create_run("rollouts", {})
    store.acquire_lease(run_id, "collect", ttl_s=60)
    with store._write() as session:  # as if held by a process on another machine
        session.execute(update(RunLease).values(holder="elsewhere:1:1", host="elsewhere", pid=1))
    with pytest.raises(RunBusy, match="on elsewhere"):
        store.acquire_lease(run_id, "collect")
    with store._write() as session:
        session.execute(update(RunLease).values(heartbeat_at=utcnow() - timedelta(seconds=61)))
    store.acquire_lease(run_id, "collect")
    assert "pid 1 " not in (store.lease_holder(run_id) or "")


def test_processes_racing_for_a_lease_get_exactly_one(store: Store, store_url: str) -> None:
    run_id = store.create_run("rollouts", {})
    race = (
        "import sys\nfrom gapforge.store import Store\nfrom gapforge.store.leases import RunBusy\n"
        "s = Store(sys.argv[1])\ntry:\n    s.acquire_lease(sys.argv[2], 'c')\n    print('won', flush=True)\n    sys.stdin.read()\n"
        "except RunBusy:\n    print('busy', flush=True)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", race, store_url, run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(3)
    ]
    first = [p.stdout.readline().strip() for p in procs]
    for p in procs:
        p.communicate("")
    assert sorted(first) == ["busy", "busy", "won"], first


def test_unknown_run_has_no_lease(store: Store) -> None:
    with pytest.raises(Exception, match="unknown run"):
        store.acquire_lease("nope", "c")


def test_a_sigkilled_holder_leaves_no_running_run_nor_lease_behind(store: Store, store_url: str) -> None:
    run_id = store.create_run("rollouts", {})
    dead = _holder(store_url, run_id, "die")
    dead.wait()
    store.set_run_status(run_id, "running")  # what the killed collector had written
    with Store(store_url) as fresh:  # any command opening the store, before any resume
        assert fresh.get_run(run_id).status == "interrupted" and fresh.lease_holder(run_id) is None
