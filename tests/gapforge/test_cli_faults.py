"""Workspace and file faults through the CLI: checked before work, one line, exit 2, no
traceback, nothing lost (a computed validation report is never lost)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from cli_helpers import one_line_error as _one_line_error
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.demo_data import SHOP_POLICY_DIR

COUNTER = Path(__file__).parents[1] / "sandbox" / "envs" / "counter_env.py"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_workspace_that_is_a_file(runner, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.write_text("precious")
    res = runner.invoke(
        app, ["rollouts", "collect", "--env", "shop", "--policy", "scripted", "--set", f"workspace={ws}"]
    )
    _one_line_error(res, "is a file, not a directory")
    assert ws.read_text() == "precious"
    assert (
        runner.invoke(app, ["config", "show", "--set", f"workspace={ws}"]).exit_code == 0
    )  # inspecting needs no workspace


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_workspace_not_writable(runner, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    res = runner.invoke(
        app, ["rollouts", "collect", "--env", "shop", "--policy", "scripted", "--set", f"workspace={locked / 'ws'}"]
    )
    _one_line_error(res, "not writable")


def test_non_utf8_config(runner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"rollouts:\n  env: caf\xe9\n")
    _one_line_error(runner.invoke(app, ["rollouts", "collect", "-c", str(bad)]), "not UTF-8")


def test_store_url_at_a_file_that_is_not_a_database(runner, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    res = runner.invoke(
        app, ["rollouts", "show", "r-1", "--set", f"workspace={tmp_path}", "--set", f"store.url=sqlite:///{notes}"]
    )
    line = _one_line_error(res, "not a gapforge SQLite store")
    assert "server" not in line and notes.read_text() == "not a database\n" * 100


def test_model_path_that_cannot_be_created(runner, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    _one_line_error(runner.invoke(app, ["dev", "tiny-model", str(tmp_path / "file" / "model")]), "cannot be created")


def test_validate_json_pointing_at_a_directory_is_refused_before_the_checks(runner, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    res = runner.invoke(
        app,
        [
            "env",
            "validate",
            str(COUNTER),
            "--json",
            str(out),
            "--set",
            "sandbox.backend=process",
            "--set",
            f"workspace={tmp_path}",
        ],
    )
    _one_line_error(res, "is a directory")
    assert "PASSED" not in res.output and "FAILED" not in res.output  # refused before any work


def test_a_computed_report_is_never_lost(tmp_path: Path) -> None:
    """If the asked-for path fails after the checks ran, the report goes to the workspace."""
    from gapforge.agents.deps import StageDeps
    from gapforge.agents.validation import validate_module
    from gapforge.config import load_config
    from gapforge.wiring import build_deps

    cfg = load_config(None, ["sandbox.backend=process", f"workspace={tmp_path}"])
    target = tmp_path / "taken"
    target.mkdir()  # a directory appeared where the file should go
    with build_deps(cfg, pool_size=0) as deps:
        assert isinstance(deps, StageDeps)
        outcome = asyncio.run(
            validate_module(deps, COUNTER, seeds=3, report_dir=tmp_path / "validations", json_out=target)
        )
    assert outcome.json_path.parent == tmp_path / "validations" and "could not write" in (outcome.note or "")
    assert json.loads(outcome.json_path.read_text())["module"].endswith("counter_env.py")


def test_sweep_without_a_daemon_gets_a_hint_that_fits(runner, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    line = _one_line_error(runner.invoke(app, ["sandbox", "sweep"]), "no Docker daemon reachable")
    assert "process" not in line and "start dockerd" in line


def test_a_model_path_under_proc_is_one_line_even_for_root(runner) -> None:
    _one_line_error(runner.invoke(app, ["dev", "tiny-model", "/proc/nope/model"]), "cannot be created")


def test_an_os_error_no_check_foresaw_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    import typer

    from gapforge.cli_common import handle_errors

    @handle_errors
    def writes() -> None:
        (tmp_path / "missing-dir" / "out.txt").write_text("x")

    probe = typer.Typer()
    probe.command()(writes)
    _one_line_error(CliRunner().invoke(probe, []), "No such file or directory")


def test_teach_first_pass_faults_are_one_line_before_any_teaching(runner, tmp_path: Path) -> None:
    card = SHOP_POLICY_DIR / "teach.json"
    out = tmp_path / "models"
    _one_line_error(
        runner.invoke(app, ["dev", "teach", "--out", str(out), "--first-pass", str(tmp_path / "nope")]),
        "no finished build there",
    )
    # a recipe without a polish has nothing to continue from a first pass (the shipped one has a polish: drop it)
    data = json.loads(card.read_text())
    data["recipe"]["polish_epochs"] = 0.0
    unpolished = tmp_path / "teach.json"
    unpolished.write_text(json.dumps(data))
    _one_line_error(
        runner.invoke(
            app, ["dev", "teach", "--recipe", str(unpolished), "--out", str(out), "--first-pass", str(card.parent)]
        ),
        "needs a recipe with polish_epochs > 0",
    )
    # the shipped card's polish continued a polished build: both passes from scratch would make another model,
    # and a --first-pass with other weights than the card names is not the build it continued
    assert json.loads(card.read_text())["first_pass"].get("polish")
    _one_line_error(
        runner.invoke(app, ["dev", "teach", "--recipe", str(card), "--out", str(out)]),
        "give that build with --first-pass DIR",
    )
    _one_line_error(
        runner.invoke(
            app, ["dev", "teach", "--recipe", str(card), "--out", str(out), "--first-pass", str(card.parent)]
        ),
        "are not the build this recipe continued",
    )
    for text, needle in (
        ('{"recipe": {}, "first_pass": "x"}', "`first_pass` is not an object"),
        ('{"recipe": {}, "first_pass": {"polish": true}}', "with recipe_hash and weights_sha256"),
        ("{not json", "Expecting property name"),
        ('{"card": 1}', "no `recipe` object"),
        ('{"recipe": {"epochs": "many"}}', "epochs"),
    ):
        bad = tmp_path / "bad.json"
        bad.write_text(text)  # a hand-edited recipe: one line naming the file, never a traceback
        line = _one_line_error(runner.invoke(app, ["dev", "teach", "--recipe", str(bad), "--out", str(out)]), needle)
        assert f"--recipe {bad}: not a teach.json" in line
    assert not out.exists()
