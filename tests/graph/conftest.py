"""Fixtures for the graph tests: a workspace config selecting the fake stage services (`stages: fixtures`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, workspace: Path, **extra: object) -> Path:
    data = {
        "workspace": str(workspace),
        "stages": "fixtures",
        "analysis": {"passes": 2, "min_passes": 2},
        "synthesis": {"max_attempts": 3},
        **extra,
    }
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def fake_config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config.yaml", tmp_path / "ws")


def calls(workspace: Path) -> list[str]:
    log = workspace / "calls.log"
    return log.read_text().splitlines() if log.is_file() else []
