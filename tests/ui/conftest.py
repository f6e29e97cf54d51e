"""One run's whole lineage, built once per session through the real graph (tests/ui/lineage.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gapforge.cli import app

STAGES = "tests.ui.lineage:open_stages"


@dataclass(frozen=True)
class Lineage:
    config: Path
    workspace: Path
    run_id: str

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.workspace / 'gapforge.db'}"

    def settings(self, **kw: object):
        from ui.sources import UiSettings

        return UiSettings(store_url=self.store_url, checkpoint_path=self.workspace / "checkpoints.sqlite", workspace=self.workspace,
                          allowed_hosts=("testserver",), **kw)  # fmt: skip


def write_lineage_config(root: Path) -> Path:
    config = root / "config.yaml"
    data = {"workspace": str(root / "ws"), "analysis": {"passes": 3, "bootstrap": 100}, "synthesis": {"max_attempts": 3}}
    config.write_text(yaml.safe_dump(data))
    return config


@pytest.fixture(scope="session")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> Lineage:
    root = tmp_path_factory.mktemp("lineage")
    config = write_lineage_config(root)
    out = CliRunner().invoke(app, ["run", "--config", str(config), "--stages", STAGES])
    assert out.exit_code == 0, out.output
    return Lineage(config, root / "ws", out.output.split()[1])
