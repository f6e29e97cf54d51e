"""`gapforge synthesize RUN` and `gapforge env show RUN CAPABILITY` on the recorded shop story (Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth_fixtures import analysed_run, store_at
from typer.testing import CliRunner

from gapforge.cli import app

runner = CliRunner()


def sets(ws: Path, sandbox_cfg) -> list[str]:
    return [
        "--set",
        f"workspace={ws}",
        "--set",
        f"sandbox.image={sandbox_cfg.image}",
        "--set",
        "sandbox.pool_size=1",
        "--set",
        "synthesis.max_attempts=3",
        "--set",
        "synthesis.validation_seeds=8",
    ]


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftover_containers")
def test_synthesize_then_show(tmp_path: Path, sandbox_cfg) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    store.close()
    result = runner.invoke(app, ["synthesize", run, *sets(tmp_path, sandbox_cfg)], terminal_width=200)
    assert result.exit_code == 1, result.output  # one capability ended unsynthesized
    out = result.output
    assert "precondition_verification attempt 1: failed: result_format" in out
    assert "precondition_verification attempt 2: accepted" in out
    assert "multi_step_task_completion: unsynthesized" in out
    accepted = tmp_path / "synthetic_envs" / run / "precondition_verification.py"
    assert accepted.is_file() and f"gapforge env validate {accepted}" in out.replace("\n", "")

    shown = runner.invoke(
        app,
        ["env", "show", run, "precondition_verification", "--attempt", "1", *sets(tmp_path, sandbox_cfg)],
        terminal_width=200,
    )
    assert shown.exit_code == 0, shown.output
    assert "attempt 1/2: failed" in shown.output and "sha256:" in shown.output
    assert "result_format" in shown.output and "rejected at stage `self_test`" in shown.output
    assert (tmp_path / "synthetic_envs" / run / "precondition_verification" / "attempt-1.py").is_file()

    # the stored attempt re-runs by hand, compared with the run's stored shop episodes
    attempt1 = tmp_path / "synthetic_envs" / run / "precondition_verification" / "attempt-1.py"
    by_hand = runner.invoke(
        app,
        ["env", "validate", str(attempt1), "--target", "shop", "--episodes-from", run, *sets(tmp_path, sandbox_cfg)],
        terminal_width=200,
    )
    assert by_hand.exit_code == 1 and "result_format" in by_hand.output and "FAILED" in by_hand.output

    again = runner.invoke(
        app,
        ["synthesize", run, "--capability", "precondition_verification", *sets(tmp_path, sandbox_cfg)],
        terminal_width=200,
    )
    assert again.exit_code == 0 and "(stored)" in again.output  # resumed from the store, nothing redone


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    store.close()
    ws = ["--set", f"workspace={tmp_path}"]
    for args, needle in (
        (["synthesize", "nope", *ws], "unknown run 'nope'"),
        (["synthesize", run, "--capability", "typo", *ws], "not a retained capability"),
        (["env", "show", run, "precondition_verification", *ws], "no synthesized env"),
    ):
        result = runner.invoke(app, args, terminal_width=200)
        assert result.exit_code == 2, result.output
        assert needle in result.output and "Traceback" not in result.output
