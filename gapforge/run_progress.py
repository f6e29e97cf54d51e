"""A run's progress inside a stage: the latest line each part of a stage reported (e.g. `collect_rollouts: 17/264
episodes`, `train precondition_verification: step 3/12 ...`), kept in `<workspace>/progress/RUN.json` while the run is
not done, so `gapforge state RUN` shows where a running or killed stage was."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from gapforge.config import GapforgeConfig

Log = Callable[[str, str], None]  # (where, one line)
ERROR = "error"  # the key of the one line saying what stopped the run (run_session.drive_run), kept until it resumes


def progress_path(cfg: GapforgeConfig, run_id: str) -> Path:
    return cfg.workspace / "progress" / f"{run_id}.json"


def read_progress(cfg: GapforgeConfig, run_id: str) -> dict[str, str]:
    try:
        data = json.loads(progress_path(cfg, run_id).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def keeping_progress(cfg: GapforgeConfig, run_id: str, log: Log | None) -> Log:
    path = progress_path(cfg, run_id)
    latest = read_progress(cfg, run_id)
    latest.pop(ERROR, None)  # what stopped the last invocation: this one starts again
    lock = threading.Lock()  # stages report from worker threads too

    def progress(where: str, text: str) -> None:
        with lock:
            latest[where] = text
            _write(path, latest)
        if log is not None:
            log(where, text)

    return progress


def note_error(cfg: GapforgeConfig, run_id: str, line: str) -> None:
    """Keep `line` (what stopped the run) in the progress file, without printing it again (the caller prints it)."""
    _write(progress_path(cfg, run_id), read_progress(cfg, run_id) | {ERROR: line})


def _write(path: Path, latest: dict[str, str]) -> None:
    """Replace the progress file whole (a reader never sees half of it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(latest, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # progress is a courtesy: never stop a run for it
