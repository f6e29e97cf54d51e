"""`gapforge run` refuses, before it creates anything, a run that could not finish: no LLM for the roles (no recording
for this env, no key, a server that does not answer), a policy whose weights are not there, an env that does not load.
One line, exit 2, no workspace, no store, no run. `--env` / `--policy` set the target and the base policy as the other
commands take them."""

from __future__ import annotations

import socket
from importlib.util import find_spec
from pathlib import Path

from cli_helpers import one_line_error
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.preflight import check_before_run
from tests.fakes.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
USER_ENV = f"{ROOT / 'examples' / 'my_agent_env.py'}:BillingEnv"
runner = CliRunner()


def _run(ws: Path, *args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, ["run", *args, "--set", f"workspace={ws}"], env={"OPENAI_API_KEY": "", **(env or {})})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_user_env_with_recorded_roles_is_refused_before_any_work(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    res = _run(ws, "--env", USER_ENV, "--policy", str(SHOP_POLICY_DIR))
    line = one_line_error(res, "llm.kind=scripted answers the analyst from recordings, and there is none for env")
    assert f"env '{USER_ENV}'" in line  # `--env` reached rollouts.env
    assert "set llm.kind=openai" in line and "llm.scripted_path=FILE" in line
    assert not ws.exists()  # nothing created: no workspace, no store, no run


def test_recorded_analyst_answers_of_the_user_s_own_still_need_the_generator_s(tmp_path: Path) -> None:
    answers = tmp_path / "analyst.yaml"
    answers.write_text(
        "analyst_discover: [{structured: {capabilities: []}}]\nanalyst_label: {repeat: {structured: {labels: []}}}\n"
    )
    res = _run(
        tmp_path / "ws", "--env", USER_ENV, "--policy", str(SHOP_POLICY_DIR), "--set", f"llm.scripted_path={answers}"
    )
    one_line_error(res, "the built-in ones answer for the shop env only")
    partial = tmp_path / "partial.yaml"
    partial.write_text("analyst_discover: [{structured: {capabilities: []}}]\n")
    res = _run(
        tmp_path / "ws", "--env", USER_ENV, "--policy", str(SHOP_POLICY_DIR), "--set", f"llm.scripted_path={partial}"
    )
    one_line_error(res, "has no answers for analyst_label")
    assert not (tmp_path / "ws").exists()


def test_openai_roles_need_a_key_or_a_server_that_answers(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    res = _run(ws, "--policy", str(SHOP_POLICY_DIR), "--set", "llm.kind=openai")
    one_line_error(res, "llm.endpoint is OpenAI's API and no key is set: export OPENAI_API_KEY")
    port = _closed_port()
    res = _run(
        ws,
        "--policy",
        str(SHOP_POLICY_DIR),
        "--set",
        "llm.kind=openai",
        "--set",
        f"llm.endpoint.base_url=http://127.0.0.1:{port}/v1",
    )
    one_line_error(res, f"llm.endpoint.base_url http://127.0.0.1:{port}/v1 does not answer")
    res = _run(
        ws,
        "--policy",
        str(SHOP_POLICY_DIR),
        "--set",
        "llm.kind=openai",
        "--set",
        "llm.endpoint.api_key_env=MY_LLM_KEY",
        "--set",
        "llm.endpoint.base_url=https://llm.example.com/v1",
    )
    one_line_error(res, "llm.endpoint.api_key_env names MY_LLM_KEY, which is not set")
    for typo in (
        "notaurl",
        "ftp://llm.example.com/v1",
        "http://[::1",
    ):  # said as the key's typo, not retried as an outage
        res = _run(
            ws, "--policy", str(SHOP_POLICY_DIR), "--set", "llm.kind=openai", "--set", f"llm.endpoint.base_url={typo}"
        )
        one_line_error(res, "config key 'llm.endpoint.base_url': ")
        assert "URL" in res.output and "policy endpoint" not in res.output, res.output
    assert not ws.exists()


def test_a_policy_without_weights_or_an_env_that_does_not_load_is_refused(tmp_path: Path) -> None:
    ws, empty = tmp_path / "ws", tmp_path / "model"
    empty.mkdir()
    one_line_error(_run(ws, "--policy", str(empty)), "holds no config.json")
    one_line_error(
        _run(ws, "--policy", str(SHOP_POLICY_DIR), "--env", "examples/my_agent_env.py:NoSuchEnv"), "NoSuchEnv"
    )
    one_line_error(_run(ws, "--env", "shop", "--resume", "r-1"), "--env, --policy and --estimate are for a new run")
    if find_spec("trackio") is None:  # not among the extras
        tracker = ["--policy", str(SHOP_POLICY_DIR), "--set", "training.report_to=[trackio]"]
        one_line_error(
            _run(ws, *tracker), "training.report_to names trackio, which is not installed: pip install trackio"
        )
    one_line_error(_run(ws, "--policy", str(SHOP_POLICY_DIR), "--set", "training.report_to=[mlflow]"), "report_to")
    assert not ws.exists()


def test_a_config_that_can_finish_passes_and_names_the_run_s_target(tmp_path: Path) -> None:
    """The demo's kind of run (the shop, its recordings, the shipped weights) and an OpenAI-compatible server that
    answers both pass; `--env` and `--policy` land in the config the run stores."""
    cfg = load_config(
        None, ["policy.kind=local", f"policy.local_path={SHOP_POLICY_DIR}", f"workspace={tmp_path / 'ws'}"], environ={}
    )
    check_before_run(cfg)
    with FakeOpenAIServer(lambda req: {"choices": []}) as server:
        served = load_config(
            None,
            [
                "policy.kind=local",
                f"policy.local_path={SHOP_POLICY_DIR}",
                "llm.kind=openai",
                f"llm.endpoint.base_url={server.base_url}",
                f"workspace={tmp_path / 'ws'}",
            ],
            environ={},
        )
        check_before_run(served)
    assert not (tmp_path / "ws").exists()
