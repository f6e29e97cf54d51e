"""The viewer over a PostgreSQL store: the store and the graph's checkpoints (in the same
database) are read through read-only transactions, and the pages show the run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the ui extra: pip install -e '.[ui]'")
import yaml  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from gapforge.store.reader import StoreReader  # noqa: E402
from gapforge.ui.app import create_app  # noqa: E402
from gapforge.ui.sources import UiSettings  # noqa: E402
from tests.ui.conftest import drive_lineage  # noqa: E402

pytestmark = pytest.mark.postgres


def test_viewer_reads_a_postgres_store_and_its_checkpoints(postgres_url: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "workspace": str(tmp_path / "ws"),
                "store": {"url": postgres_url},
                "analysis": {"passes": 2, "min_passes": 2, "bootstrap": 50},
                "synthesis": {"max_attempts": 3},
                "stages": "fixtures",
            }
        )
    )
    rid = drive_lineage(config)
    settings = UiSettings(
        store_url=postgres_url,
        checkpoint_path=tmp_path / "unused.sqlite",
        workspace=tmp_path / "ws",
        allowed_hosts=("testserver",),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert rid in c.get("/").text
        page = c.get(f"/runs/{rid}").text
        timeline = re.search(r'id="timeline">(.*?)</table>', page, re.S)
        assert (
            timeline and "collect_rollouts" in timeline.group(1) and "report" in timeline.group(1)
        )  # from the PG checkpoints
        assert "LACKING (" in c.get(f"/runs/{rid}/capability?name=precondition_verification").text
    with StoreReader(postgres_url) as reader, pytest.raises(Exception, match="read-only transaction"):
        reader.set_run_status(rid, "failed")
