"""The training launcher (training/run.py) stops a job left running by a killed earlier run, and nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gapforge.training.run import pid_file, stop_stale_job


def test_a_stale_job_is_stopped_through_its_pid_file_and_nothing_else(tmp_path: Path) -> None:
    spec, other = tmp_path / "alpha.json", tmp_path / "beta.json"
    sleeper = "import time; time.sleep(120)"
    mine = subprocess.Popen([sys.executable, "-c", sleeper, "gapforge.training.run", str(spec)])
    theirs = subprocess.Popen([sys.executable, "-c", sleeper, "gapforge.training.run", str(other)])
    try:
        pid_file(spec).write_text(f"{mine.pid}\n")
        pid_file(other).write_text(f"{mine.pid}\n")  # a pid file naming a process that trains another spec: left alone
        assert stop_stale_job(other) is False and mine.poll() is None
        assert stop_stale_job(spec) is True
        assert mine.wait(10) == -9
        assert theirs.poll() is None and not pid_file(spec).exists()
        assert stop_stale_job(spec) is False  # no pid file: nothing to stop
    finally:
        theirs.kill()
        mine.kill()
        theirs.wait(10)
