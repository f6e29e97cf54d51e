"""Workspace and output-path checks made before work starts, so a path fault is one line (exit 2) instead of a traceback
after minutes of work, and a computed result is never lost."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gapforge.errors import UsageError


def check_output_dir(path: Path, what: str) -> None:
    """`path` is (or can be created as) a directory this process may write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} '{path}' is a file, not a directory: point it at a directory")
    base = path.absolute()  # then its nearest existing ancestor
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise UsageError(f"{what} '{path}' cannot be created: '{base}' is a file, not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UsageError(f"{what} '{path}' is not writable ('{base}' denies writing): pick a writable path")
    if not path.exists():  # os.access says yes to root everywhere (even /proc): try it, leaving nothing behind
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".gapforge-probe-", dir=base))
        except OSError as e:
            raise UsageError(
                f"{what} '{path}' cannot be created in '{base}' ({e.strerror}): pick a writable path"
            ) from None


def check_workspace(workspace: Path) -> None:
    check_output_dir(workspace, "workspace (config `workspace` / GAPFORGE_WORKSPACE)")


def check_output_file(path: Path | None, what: str) -> None:
    """`path` (None: no file asked for) can be written as a file: not a directory, its parent a writable directory."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} '{path}' is a directory: give a file path, e.g. '{path / 'report.json'}'")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{what} '{path}' is not writable: pick another path")
    check_output_dir(path.parent, f"the directory of {what}")
