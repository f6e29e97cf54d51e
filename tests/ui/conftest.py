"""One run's whole lineage, built once per session through the real graph (tests/ui/lineage.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml


def drive_lineage(config: Path, *, review: bool = False) -> str:
    """Run the REAL graph over tests/ui/lineage.py's stages (passed in-process: a run started from the CLI gets
    its stages from its config, never from a code path); returns the run id."""
    from gapforge.config import load_config
    from gapforge.run_session import RunOptions, create_run, drive_run
    from gapforge.wiring import open_store
    from tests.ui.lineage import open_stages

    cfg = load_config(config)
    options = RunOptions(review=review)
    with open_store(cfg) as store:
        run_id = create_run(store, "trace", "run", cfg, options)
        drive_run(cfg, store, run_id, options, fresh=True, open_stages=open_stages)
    return run_id


@dataclass(frozen=True)
class Lineage:
    config: Path
    workspace: Path
    run_id: str

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.workspace / 'gapforge.db'}"

    def settings(self, **kw: object):
        from gapforge.ui.sources import UiSettings

        return UiSettings(
            store_url=self.store_url,
            checkpoint_path=self.workspace / "checkpoints.sqlite",
            workspace=self.workspace,
            allowed_hosts=("testserver",),
            **kw,
        )


def write_lineage_config(root: Path) -> Path:
    config = root / "config.yaml"
    data = {
        "workspace": str(root / "ws"),
        "analysis": {"passes": 3, "bootstrap": 100},
        "synthesis": {"max_attempts": 3},
        "stages": "fixtures",
    }  # not the real services: drive_lineage passes the lineage stages
    config.write_text(yaml.safe_dump(data))
    return config


@pytest.fixture(scope="session")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> Lineage:
    root = tmp_path_factory.mktemp("lineage")
    config = write_lineage_config(root)
    return Lineage(config, root / "ws", drive_lineage(config))
