"""The dependency direction of DESIGN.md §2 holds: import-linter's contracts in
`.importlinter` (run as `lint-imports`) are all kept, and no code below gapforge/
imports gapforge (but its error root, gapforge.faults, and the demo's data locations, gapforge.demo_data:
both import nothing of ours)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("graph", "executor", "agents", "training", "serving", "sandbox", "envs", "store", "prompts", "bench")


def _lint_imports() -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.skip("import-linter is not installed (it is in the dev extra: pip install -e .[dev])")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(exe), "--no-logo", "--no-cache", "--config", str(ROOT / ".importlinter")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_import_linter_contracts_are_kept() -> None:
    proc = _lint_imports()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"Contracts: (\d+) kept, 0 broken", proc.stdout)


def test_a_violation_is_caught(tmp_path: Path) -> None:
    """The contracts are live: a sandbox module importing gapforge breaks the layers contract."""
    bad = ROOT / "sandbox" / "_contract_probe_tmp.py"
    bad.write_text("from gapforge.config import load_config  # noqa: F401\n")
    try:
        proc = _lint_imports()
    finally:
        bad.unlink()
    assert proc.returncode != 0
    assert "sandbox._contract_probe_tmp -> gapforge.config" in proc.stdout


def test_nothing_below_gapforge_imports_it() -> None:
    """...but the error root, gapforge.faults (it imports nothing: tests/gapforge/test_error_root.py), and
    gapforge.demo_data (the recordings' and the shipped policy's paths: tests/gapforge/test_demo_data.py)."""
    pattern = re.compile(r"^\s*(from gapforge\b(?!\.(faults|demo_data) import )|import gapforge\b)", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for layer in LAYERS
        for p in (ROOT / layer).rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
