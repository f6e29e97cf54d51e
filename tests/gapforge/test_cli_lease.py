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

from gapforge.store import Store

ROOT = Path(__file__).parents[2]
ENV = os.environ | {"COLUMNS": "300"}
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
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(workspace), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
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


def test_a_collector_paused_past_the_ttl_stops_and_the_counts_add_up(workspace: Path) -> None:
    """The SIGSTOP run of issue 23: collector A is paused past the lease ttl, collector B takes the
    run over, A is resumed: A stops with one line saying it lost the run, the
    store holds each episode once, and what A and B say they stored adds up to the run's size."""
    import re
    import time

    from gapforge.envs.registry import make_env
    from tests.fakes.fake_openai import FakeOpenAIServer, tool_call_message

    tasks = ",".join(make_env("shop").task_ids()[:6])
    ttl = 1.0
    with FakeOpenAIServer(
        lambda _r: tool_call_message("get_product_details", {"product_id": "nope"}), latency_s=0.1
    ) as srv:
        args = [
            sys.executable,
            "-m",
            "gapforge.cli",
            "rollouts",
            "collect",
            "--env",
            "shop",
            "--policy",
            srv.base_url,
            "--tasks",
            tasks,
            "--samples",
            "4",
            "--concurrency",
            "2",
            "--set",
            "rollouts.max_turns=2",
            "--set",
            f"workspace={workspace}",
            "--set",
            f"store.lease_ttl_s={ttl}",
        ]
        a = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
        run_id = a.stdout.readline().split()[-1]
        db = f"sqlite:///{workspace / 'gapforge.db'}"
        deadline = time.monotonic() + 60
        with Store(db) as store:
            while len(store.episodes(run_id)) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(a.pid, signal.SIGSTOP)
            paused = time.monotonic()
            while time.monotonic() - paused < ttl * 1.5:  # past the ttl: A's heartbeat is stale
                time.sleep(0.1)
            b = subprocess.Popen(
                [*args, "--run", run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV
            )
            while "pid " + str(b.pid) not in (store.lease_holder(run_id) or "") and time.monotonic() < deadline:
                time.sleep(0.05)  # B has taken the run over (or A holds SQLite's write lock: resume A anyway)
            os.kill(a.pid, signal.SIGCONT)
            a_out, a_err = a.communicate(
                timeout=60
            )  # a hang guard, not a speed bound: A stops at its next heartbeat or write
            b_out, b_err = b.communicate(timeout=120)
            rows = store.episodes(run_id)
    assert b.returncode == 0, b_err
    assert a.returncode == 2, a_out + a_err
    a_errors = [line for line in a_err.splitlines() if line.startswith("error:")]
    assert len(a_errors) == 1 and f"lost run '{run_id}' to `rollouts collect` (pid {b.pid}" in a_errors[0], a_err
    assert len(rows) == 24 and len({(r.task_id, r.sample) for r in rows}) == 24  # each episode once
    a_ran = int(re.search(r"(\d+) episodes ran \(stored by this process", a_out).group(1))
    b_ran, b_skipped = map(int, re.search(r"(\d+) episodes ran, (\d+) already stored", b_out).groups())
    assert a_ran + b_ran == 24 and b_skipped == a_ran, (a_out, b_out)
