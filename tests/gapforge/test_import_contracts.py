"""The layers' dependency direction (docs/architecture.md) holds: import-linter's contracts in
`.importlinter` (run by `.ci/lint-imports` over the installed layout) are all kept, and no code
below gapforge/ imports gapforge's own modules (but its error root, gapforge.faults, and the demo's data
locations, gapforge.demo_data: both import nothing of ours)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
FOLDERS = [folder for folder in PACKAGE_DIR.values() if folder != "gapforge"]  # the folders that install under gapforge
LAYERS = ("graph", "executor", "agents", "training", "serving", "sandbox", "envs", "store", "prompts", "bench")


def _lint_imports() -> subprocess.CompletedProcess[str]:
    if not Path(sys.executable).with_name("lint-imports").exists():
        pytest.skip("import-linter is not installed (it is in the dev extra: pip install -e .[dev])")
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        [str(ROOT / ".ci" / "lint-imports"), "--no-logo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_linter_contracts_are_kept() -> None:
    proc = _lint_imports()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"Contracts: (\d+) kept, 0 broken", proc.stdout)


def test_a_violation_is_caught(tmp_path: Path) -> None:
    """The contracts are live: a sandbox module importing the graph above it breaks the layers contract."""
    bad = ROOT / "sandbox" / "_contract_probe_tmp.py"
    bad.write_text("from gapforge.graph.state import RunState  # noqa: F401\n")
    try:
        proc = _lint_imports()
    finally:
        bad.unlink()
    assert proc.returncode != 0
    assert "gapforge.sandbox._contract_probe_tmp -> gapforge.graph.state" in proc.stdout


def test_nothing_below_gapforge_imports_it() -> None:
    """...but the error root, gapforge.faults (it imports nothing: tests/gapforge/test_error_root.py), and
    gapforge.demo_data (the recordings' and the shipped policy's paths: tests/gapforge/test_package_data.py). The folders
    below are gapforge's subpackages: an import of one of them is not an import of the composition root."""
    below = "|".join(FOLDERS)
    pattern = re.compile(
        rf"^\s*(from gapforge(?!\.(faults|demo_data) import |\.({below})\b|\s+import\s+({below})(\s*,\s*({below}))*\s*$)\S*\s+import\b"
        rf"|import gapforge(?!\.({below})\b))",
        re.M,
    )
    offenders = [
        str(p.relative_to(ROOT))
        for layer in LAYERS
        for p in (ROOT / layer).rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
