"""Small parts of the real stage bindings (gapforge/run_stages.py) that need no stage to be installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gapforge.run_stages import require, stop_orphans
from graph.context import StageUnavailable


def test_require_says_a_missing_stage_is_unavailable_but_lets_real_import_errors_through(tmp_path: Path) -> None:
    with pytest.raises(StageUnavailable, match=r"GRPO training \(gapforge_no_such_stage.service\) is not in this installation"):
        require("gapforge_no_such_stage.service", "GRPO training")
    (tmp_path / "brokenstage.py").write_text("import gapforge_missing_dependency\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ModuleNotFoundError, match="gapforge_missing_dependency"):
            require("brokenstage", "a stage with a broken import")
    finally:
        sys.path.remove(str(tmp_path))


def test_stop_orphans_kills_only_the_training_process_of_that_job(tmp_path: Path) -> None:
    spec, other = tmp_path / "alpha.json", tmp_path / "beta.json"
    sleeper = "import time; time.sleep(120)"
    mine = subprocess.Popen([sys.executable, "-c", sleeper, "training.run", str(spec)])
    theirs = subprocess.Popen([sys.executable, "-c", sleeper, "training.run", str(other)])
    try:
        assert stop_orphans(str(spec)) == 1
        assert mine.wait(10) == -9
        assert theirs.poll() is None
    finally:
        theirs.kill()
        mine.kill()
        theirs.wait(10)
