"""`gapforge train` / `gapforge adapters`: one-line errors, the adapters table from the store."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.store.db import Store


def test_train_without_a_base_model_is_a_one_line_error(workspace):
    res = CliRunner().invoke(app, ["train", "r-20260101-abcdef", "--set", f"workspace={workspace}"])
    assert res.exit_code == 2 and "no store at" in res.output and "Traceback" not in res.output
    assert not (workspace / "gapforge.db").exists()  # the refusal created no empty store
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {})  # stores no config: the invocation's (no base model) is used, and said
    res = CliRunner().invoke(app, ["train", "r-20260101-abcdef", "--set", f"workspace={workspace}"])
    assert res.exit_code == 2 and "unknown run" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["train", run_id, "--set", f"workspace={workspace}"])
    assert res.exit_code == 2 and "policy.local_path" in res.output and "Traceback" not in res.output
    assert "stores no config" in res.output
    res = CliRunner().invoke(app, ["train", run_id, "--set", f"workspace={workspace}", "--set", "policy.local_path=x"])
    assert res.exit_code == 2 and "not a Hugging Face model dir: pass --set policy.local_path=DIR" in res.output
    assert "--base" not in res.output  # train has no --base flag


def test_train_without_a_validated_env_says_what_to_do(workspace, tiny_model_dir):
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {})
    res = CliRunner().invoke(
        app, ["train", run_id, "--set", f"workspace={workspace}", "--set", f"policy.local_path={tiny_model_dir}"]
    )
    assert res.exit_code == 2 and "no validated synthetic env" in res.output


def test_adapters_table_shows_heldout_before_and_after(workspace):
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {})
        store.put_adapter(
            run_id,
            "grpo_on_target",
            path="/x/adapter",
            status="done",
            metrics={"steps": 12, "heldout_before": 0.25, "heldout_after": 0.5},
        )
        store.put_adapter(run_id, "broken", path="", status="failed", metrics={"error": "RuntimeError: boom"})
        store.put_adapter(run_id, "baseline_grpo_target", path="/x/b", status="done", metrics={"steps": 32})
    res = CliRunner().invoke(app, ["adapters", run_id, "--set", f"workspace={workspace}"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "0.250 -> 0.500" in res.output and "RuntimeError: boom" in res.output and "failed" in res.output
    assert re.search(r"baseline_grpo_target\s+│\s+\(GRPO on the target\)\s+│\s+done", res.output), res.output


def test_adapters_table_says_untrained_for_step0_and_the_margin_otherwise(workspace):
    curve = [{"step": 0, "reward": 0.1}, {"step": 8, "reward": 0.4, "vs_step0": {"diff": 0.3, "low": 0.12, "n": 32}}]
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {})
        store.put_adapter(
            run_id, "kept0", path="/x/a", status="done", metrics={"steps": 8, "best_step": 0, "curve": curve[:1]}
        )
        store.put_adapter(
            run_id, "kept8", path="/x/b", status="done", metrics={"steps": 8, "best_step": 8, "curve": curve}
        )
    res = CliRunner().invoke(app, ["adapters", run_id, "--set", f"workspace={workspace}"], env={"COLUMNS": "220"})
    assert res.exit_code == 0, res.output
    assert "step 0 (untrained)" in res.output
    assert "step 8 (+0.300, low +0.120, n 32)" in res.output
