"""kill -9 a `gapforge run` at each stage in turn; `gapforge run --resume` finishes it with
exactly the rows of an uninterrupted run and without redoing stored work."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.wiring import open_store
from tests.fakes.fake_stages import row_counts
from tests.graph.conftest import ROOT, calls, write_config

# Where to kill, in the order the run reaches them: mid-rollouts, mid-labeling pass 2,
# synthesis attempt 2 of beta (alpha's branch goes on meanwhile), training of beta, the baseline, mid-evaluation.
HOLDS = ("collect_rollouts", "label:1", "synthesize:beta:2", "train:beta", "train_baseline", "evaluate")


def _cli(*args: str, out: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "gapforge.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
    )


def _kill_when_held(proc: subprocess.Popen[bytes], workspace: Path, log: Path) -> None:
    reached = workspace / "reached"
    deadline = time.monotonic() + 120
    while not reached.is_file():
        assert proc.poll() is None, f"run ended before reaching the hold: {log.read_text()}"
        assert time.monotonic() < deadline, "hold never reached"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    reached.unlink()


def test_kill_at_each_stage_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    ref_cfg = write_config(tmp_path / "ref.yaml", tmp_path / "ref")
    result = CliRunner().invoke(app, ["run", "--config", str(ref_cfg)])
    assert result.exit_code == 0, result.output
    ref_id = result.output.split()[1]
    with open_store(load_config(ref_cfg)) as store:
        expected = row_counts(store, ref_id)

    cfg = write_config(tmp_path / "killed.yaml", tmp_path / "ws")
    workspace = load_config(cfg).workspace
    workspace.mkdir(parents=True)
    log = tmp_path / "out.txt"
    run_id = None
    for hold in HOLDS:
        (workspace / "hold").write_text(hold)
        args = ["run", "--config", str(cfg)] + (["--resume", run_id] if run_id else [])
        proc = _cli(*args, out=log)
        _kill_when_held(proc, workspace, log)
        run_id = run_id or log.read_text().split()[1]
        with open_store(load_config(cfg)) as store:
            assert (
                store.get_run(run_id).status == "interrupted"
            )  # killed: its dead lease is reaped when the store is opened
        if (
            hold == "collect_rollouts"
        ):  # what a user sees after the kill: the status, how to resume, how far the stage got
            state = CliRunner().invoke(app, ["state", run_id, "--config", str(cfg)]).output
            assert "status: interrupted" in state and f"continue with `gapforge run --resume {run_id}`" in state, state
            assert "in progress: collect_rollouts: 5/10 episodes" in state, state
            runs = CliRunner().invoke(app, ["runs", "--config", str(cfg)]).output
            assert f"{run_id} is interrupted: continue with `gapforge run --resume {run_id}`" in runs, runs
    (workspace / "hold").unlink()
    proc = _cli("run", "--resume", run_id, "--config", str(cfg), out=log)
    assert proc.wait(120) == 0, log.read_text()
    assert log.read_text().strip().splitlines()[-1] == f"run {run_id}"

    with open_store(load_config(cfg)) as store:
        assert row_counts(store, run_id) == expected
        assert store.get_run(run_id).status == "done"
    done = collections.Counter(calls(workspace))
    # Work finished before a kill is never redone; only what was in flight may run again
    # (keyed writes make that harmless: the row counts above are equal).
    once = [line for line in done if line.startswith(("rollout", "label", "discover", "select", "synthesize"))]
    assert {line: done[line] for line in once if done[line] > 1} == {}
    assert sum(1 for line in done if line.startswith("rollout")) == 10
    assert sum(1 for line in done if line.startswith("label")) == 20
