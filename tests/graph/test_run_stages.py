"""Small parts of the real stage bindings (gapforge/stages/) and the training launcher that need no stage to be installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gapforge.graph.context import StageUnavailable
from gapforge.stages.common import require
from gapforge.training.run import pid_file, stop_stale_job


def test_require_says_a_missing_stage_is_unavailable_but_lets_real_import_errors_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        StageUnavailable, match=r"GRPO training \(gapforge_no_such_stage.service\) is not in this installation"
    ):
        require("gapforge_no_such_stage.service", "GRPO training")
    (tmp_path / "brokenstage.py").write_text("import gapforge_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="gapforge_missing_dependency"):
        require("brokenstage", "a stage with a broken import")


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
