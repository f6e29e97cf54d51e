"""One working process per run, through the CLI: while another process holds a run (here
through the same `gapforge.run_lease.run_lease` every stage command uses), `gapforge
synthesize RUN` stops before any work with one line naming the holder and exit 2; once the
holder is gone (finished, or SIGKILLed) the command gets the run and releases it at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from store import Store

ROOT = Path(__file__).parents[2]
ENV = os.environ | {"PYTHONPATH": str(ROOT), "COLUMNS": "300"}
HOLD = """
import sys
from gapforge.config import load_config
from gapforge.run_lease import run_lease
cfg = load_config(None, [f"workspace={sys.argv[1]}"], environ={})
with run_lease(cfg, sys.argv[2], "analyze"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _holder(workspace: Path, run_id: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(workspace), run_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env=ENV)  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def _synthesize(workspace: Path, run_id: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gapforge.cli", "synthesize", run_id, "--set", f"workspace={workspace}"]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)


def test_a_second_process_on_a_run_is_refused_with_the_holder_named(workspace: Path) -> None:
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {})
    holder = _holder(workspace, run_id)
    try:
        busy = _synthesize(workspace, run_id)
    finally:
        holder.communicate("")  # the holder finishes and releases
    assert busy.returncode == 2, busy.stderr
    err = busy.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"in use by `analyze` (pid {holder.pid} on " in err

    free = _synthesize(workspace, run_id)  # the run is free: the command gets past the lease to its own check
    assert free.returncode == 2 and "no retained capability" in free.stderr, free.stderr
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        assert store.lease_holder(run_id) is None  # released at the end, even on an error

    killed = _holder(workspace, run_id)
    os.kill(killed.pid, signal.SIGKILL)  # no release: the dead holder's lease is taken over
    killed.wait()
    after = _synthesize(workspace, run_id)
    assert after.returncode == 2 and "no retained capability" in after.stderr, after.stderr


def test_a_graph_run_is_leased_too(workspace: Path) -> None:
    from gapforge.config import load_config
    from gapforge.run_session import RunOptions, run_record

    cfg = load_config(None, [f"workspace={workspace}"], environ={})
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", run_record("run", cfg, RunOptions()))
    holder = _holder(workspace, run_id)
    try:
        cmd = [sys.executable, "-m", "gapforge.cli", "run", "--resume", run_id, "--set", f"workspace={workspace}"]
        busy = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    finally:
        holder.communicate("")
    assert busy.returncode == 2, busy.stdout + busy.stderr
    assert f"in use by `analyze` (pid {holder.pid} on " in busy.stderr and "Traceback" not in busy.stderr
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        assert store.get_run(run_id).status != "running"  # refused before any work
