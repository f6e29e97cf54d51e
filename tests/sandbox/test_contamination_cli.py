"""`gapforge env validate PATH --target shop --episodes-from RUN` guards RUN's held-out split (Docker): the
recorded env with its openings before the fix fails `contamination` naming the held-out tasks, the recorded
env as shipped passes it, and a run without a split reports it skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.agents.analysis.split import ensure_split
from gapforge.cli import app
from gapforge.demo_data import RECORDINGS_DIR
from gapforge.store import Store
from tests.fakes.planted_policy import collect_planted

RECORDED = RECORDINGS_DIR / "shop" / "precondition_verification_3.py"
runner = CliRunner()
pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose store holds one planted episode per shop task in run r-split (with the demo's split) and r-nosplit."""
    ws = tmp_path_factory.mktemp("ws")
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        for run in ("r-split", "r-nosplit"):
            store.create_run("trace", {"rollouts": {"env": "shop"}}, run_id=run, versions={})
            collect_planted(store, run, samples=1, seed=0)
        ensure_split(store, "r-split", fraction=0.5, seed=0)
    return ws


def validate(module: Path, run: str, workspace: Path, sandbox_config) -> tuple[int, dict, str]:
    out = workspace / f"{module.stem}-{run}.json"
    result = runner.invoke(
        app,
        [
            "env",
            "validate",
            str(module),
            "--target",
            "shop",
            "--episodes-from",
            run,
            "--seeds",
            "6",
            "--json",
            str(out),
            "--set",
            f"workspace={workspace}",
            "--set",
            f"sandbox.image={sandbox_config.image}",
            "--set",
            "sandbox.pool_size=1",
        ],
        terminal_width=240,
    )
    return result.exit_code, json.loads(out.read_text()), result.output


def test_the_recorded_env_before_and_after_its_openings_were_reworded(
    tmp_path: Path, workspace: Path, sandbox_config, no_leftovers
) -> None:
    before = tmp_path / "precondition_verification_before.py"
    before.write_text(
        RECORDED.read_text().replace(
            "Hi, please cancel one of my orders, I changed my mind about it.",
            "Hi, I want to cancel my order, I don't need it anymore.",
        )
    )
    code, report, output = validate(before, "r-split", workspace, sandbox_config)
    check = next(c for c in report["checks"] if c["name"] == "contamination")
    assert code == 1 and check["verdict"] == "FAIL" and "contamination" in output
    assert {tuple(m["heldout_tasks"]) for m in check["evidence"]["matches"]} == {
        ("shop-refusal-001", "shop-refusal-002")
    }
    assert [c["name"] for c in report["checks"] if c["verdict"] == "FAIL"] == ["contamination"]

    code, report, _ = validate(RECORDED, "r-split", workspace, sandbox_config)
    assert code == 0 and next(c for c in report["checks"] if c["name"] == "contamination")["verdict"] == "PASS"

    code, report, output = validate(before, "r-nosplit", workspace, sandbox_config)
    skipped = next(c for c in report["checks"] if c["name"] == "contamination")
    assert code == 0 and skipped["verdict"] == "SKIP" and skipped["summary"].startswith("skipped: no split")
    assert "run r-nosplit has no task split yet (`gapforge analyze r-nosplit` makes one)" in output
