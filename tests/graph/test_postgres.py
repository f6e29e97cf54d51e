"""The graph with the PostgreSQL store AND checkpointer (CI starts the server)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.wiring import open_store
from tests.fakes.fake_stages import row_counts
from tests.graph.conftest import write_config

pytestmark = pytest.mark.postgres


def test_run_review_resume_and_fork_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    pytest.importorskip("langgraph.checkpoint.postgres", reason="the postgres extra is not installed")
    cfg = write_config(tmp_path / "pg.yaml", tmp_path / "ws", store={"url": postgres_url})
    runner = CliRunner()
    out = runner.invoke(app, ["run", "--review", "--config", str(cfg)])
    assert out.exit_code == 0, out.output
    rid = out.output.split()[1]
    assert "paused before review" in out.output
    assert not (tmp_path / "ws" / "checkpoints.sqlite").exists()  # checkpoints live in PostgreSQL

    from gapforge.graph.checkpoint import libpq_url, open_checkpointer

    async def threads() -> set[str]:
        async with open_checkpointer(postgres_url, tmp_path / "unused.sqlite") as saver:
            return {
                t.config["configurable"]["thread_id"] async for t in saver.alist({"configurable": {"thread_id": rid}})
            }

    assert asyncio.run(threads()) == {rid}
    assert libpq_url(postgres_url).startswith("postgresql://")

    assert runner.invoke(app, ["review", rid, "--approve", "--config", str(cfg)]).exit_code == 0
    out = runner.invoke(app, ["run", "--resume", rid, "--config", str(cfg)])
    assert out.exit_code == 0, out.output
    with open_store(load_config(cfg)) as store:
        assert row_counts(store, rid)["adapters"] == 3  # alpha, beta, the GRPO-on-target baseline
        assert store.get_run(rid).status == "done"

    hist = runner.invoke(app, ["history", rid, "--config", str(cfg)]).output
    assert "review decision" in hist
    before_select = next(m.group(1) for m in re.finditer(r"│ \d+\s+│ (\S+)\s+│ [^│]+│[^│]+│[^│]+│ select\s+│", hist))
    out = runner.invoke(
        app, ["fork", rid, "--checkpoint", before_select, "--set", "analysis.delta=0.5", "--config", str(cfg)]
    )
    assert out.exit_code == 0, out.output
    fid = out.output.split()[1]
    with open_store(load_config(cfg)) as store:
        assert [c.name for c in store.capabilities(fid, retained=True)] == ["alpha"]
