"""`gapforge serve` / `evaluate` / `report`: the real command end to end (serve in a
subprocess, called with the openai client) and one-line errors with exit 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from router_helpers import random_adapter
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.store import Store


def _store_with_adapter(ws: Path, tiny_model_dir: Path) -> str:
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        run = store.create_run("trace", {})
        store.put_capability(run, "precondition_verification", definition="Check eligibility before acting.")
        store.set_capability_retained(run, "precondition_verification", True)
        path = random_adapter(tiny_model_dir, ws / "adapters" / "pv", seed=3)
        store.put_adapter(
            run,
            "precondition_verification",
            path=str(path),
            metrics={},
            status="trained",
            capability="precondition_verification",
        )
    return run


def _store_with_split(ws: Path, tiny_model_dir: Path) -> tuple[str, list[str]]:
    """A run with one adapter and the analysis' split (evaluation plays only the held-out task), and the `--set`
    items of a fast evaluation of it."""
    run = _store_with_adapter(ws, tiny_model_dir)
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        store.put_split(
            run,
            env="shop",
            seed=0,
            fraction=0.5,
            analysis_tasks=["shop-refusal-001"],
            heldout_tasks=["shop-refusal-002"],
            families={"shop-refusal-001": "policy_refusal", "shop-refusal-002": "policy_refusal"},
        )
    return run, ["--set", f"workspace={ws}", "--set", "rollouts.max_turns=1", "--set", "policy.max_new_tokens=4"]


def test_errors_are_one_line_with_exit_2(workspace: Path, tiny_model_dir: Path) -> None:
    run = _store_with_adapter(workspace, tiny_model_dir)
    runner = CliRunner()
    ws = f"workspace={workspace}"
    res = runner.invoke(app, ["report", "r-nope", "--set", ws])
    assert res.exit_code == 2 and "r-nope" in res.output
    res = runner.invoke(app, ["serve", run, "--set", ws, "--base", str(workspace / "missing")])
    assert res.exit_code == 2 and "--base" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["evaluate", run, "--set", ws, "--base", str(tiny_model_dir)])
    assert res.exit_code == 2 and "--tasks" in res.output  # no stored split, no --tasks
    res = runner.invoke(app, ["report", run, "--set", ws])
    assert res.exit_code == 0, res.output
    text = (workspace / "reports" / run / "report.md").read_text()
    assert "No evaluation stored yet" in text


def test_serve_warns_without_a_key_off_loopback_and_needs_the_named_variable(
    workspace: Path, tiny_model_dir: Path
) -> None:
    run = _store_with_adapter(workspace, tiny_model_dir)
    runner = CliRunner()
    missing = ["--set", f"workspace={workspace}", "--base", str(workspace / "missing")]  # stops before binding
    open_ = runner.invoke(app, ["serve", run, "--host", "0.0.0.0", *missing])
    assert "warning: serving on 0.0.0.0 without an API key" in open_.output and open_.exit_code == 2
    local = runner.invoke(app, ["serve", run, *missing])
    assert "warning" not in local.output
    unset = runner.invoke(
        app, ["serve", run, "--api-key-env", "NO_SUCH_SERVE_KEY", *missing], env={"NO_SUCH_SERVE_KEY": ""}
    )
    assert unset.exit_code == 2 and "NO_SUCH_SERVE_KEY is not set" in unset.output and "Traceback" not in unset.output


def test_evaluate_then_report_from_the_cli(workspace: Path, tiny_model_dir: Path) -> None:
    run, sets = _store_with_split(workspace, tiny_model_dir)
    res = CliRunner().invoke(app, ["evaluate", run, "--trials", "1", "--base", str(tiny_model_dir), *sets])
    assert res.exit_code == 0, res.output
    assert "trace_routed" in res.output and "capability_hints" in res.output
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        names = {e.name for e in store.evaluations(run)}
        played = {e.task_id for e in store.episodes(f"{run}.eval.base")}
    # + the router's data, stored with the run when evaluate built it (evaluation/router_record.py), and oracle routing (evaluation/oracle.py)
    assert names == {
        "eval:base",
        "eval:trace_routed",
        "eval:adapter:precondition_verification",
        "eval:capability_hints",
        "router",
        "oracle",
    }
    assert played == {"shop-refusal-002"}
    res = CliRunner().invoke(app, ["report", run, *sets])
    assert res.exit_code == 0 and (workspace / "reports" / run / "eval_pass_rate.png").is_file()


def test_serve_answers_the_openai_client(workspace: Path, tiny_model_dir: Path) -> None:
    run = _store_with_adapter(workspace, tiny_model_dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SERVE_KEY": "k-serve"}
    cmd = [
        sys.executable,
        "-m",
        "gapforge.cli",
        "serve",
        run,
        "--port",
        str(port),
        "--base",
        str(tiny_model_dir),
        "--set",
        f"workspace={workspace}",
        "--set",
        "policy.max_new_tokens=4",
        "--api-key-env",
        "SERVE_KEY",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k-serve", max_retries=0)
        deadline = time.monotonic() + 240
        while True:
            try:
                ids = [m.id for m in client.models.list().data]
                break
            except openai.APIConnectionError:
                assert proc.poll() is None, proc.stderr.read()[-2000:]
                assert time.monotonic() < deadline, "gapforge serve did not come up"
                time.sleep(0.5)
        assert ids == ["gapforge-router", tiny_model_dir.name, "precondition_verification"]
        r = client.chat.completions.create(
            model="gapforge-router", messages=[{"role": "user", "content": "Cancel order 1012"}]
        )
        assert r.choices[0].message.role == "assistant" and r.model_extra["gapforge"]["decision"]["label"] in ("A", "B")
        stranger = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            stranger.chat.completions.create(
                model="gapforge-router", messages=[{"role": "user", "content": "Cancel order 1012"}]
            )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_evaluate_with_report_to_logs_the_summary_in_the_runs_tracking_dir(
    workspace: Path, tiny_model_dir: Path
) -> None:
    """training.report_to=[tensorboard]: the evaluate stage writes its summary beside the adapters' curves."""
    pytest.importorskip(
        "tensorboard", reason="extra 'tracking' not installed (pip install -e .[tracking]); CI installs it"
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, sets = _store_with_split(workspace, tiny_model_dir)
    tracked = ["--set", "training.report_to=[tensorboard]", "--set", "evaluation.comparisons=[]"]
    res = CliRunner().invoke(app, ["evaluate", run, "--trials", "1", "--base", str(tiny_model_dir), *sets, *tracked])
    assert res.exit_code == 0, res.output
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        routed = store.get_evaluation(run, "eval:trace_routed").metrics["pass_rate"]["value"]
    events = EventAccumulator(str(workspace / "tracking" / run / "evaluation")).Reload()
    logged = events.Scalars("eval/trace_routed/pass_rate")
    assert len(logged) == 1 and abs(logged[0].value - routed) < 1e-6  # the stored pass rate, in the run's tracking dir
