"""Secrets stay where they belong: the default OPENAI_API_KEY goes only to OpenAI's API, a named
key only to its endpoint and never in clear text off this machine, and a URL's password is masked
wherever it is printed or stored (config show, a run's stored config, a training spec, errors, logs)."""

from __future__ import annotations

import importlib.util
import io
import logging
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import run_id_in
from typer.testing import CliRunner

from gapforge.agents.errors import ModelError
from gapforge.cli import app
from gapforge.config import ConfigError, load_config
from gapforge.errors import UsageError
from gapforge.run_session import RunOptions, config_from_record, run_record
from gapforge.store.redact import install_log_redaction, redact
from gapforge.wiring import apply_policy_spec, make_policy
from tests.fakes.fake_openai import FakeOpenAIServer, text_reply

PLANTED = "PLANTED-s3cr3t-7781"
OPENAI_KEY = "sk-default-PLANTED-key"


def _key(cfg_overrides: list[str], environ: dict[str, str], section: str = "policy") -> str | None:
    cfg = load_config(None, cfg_overrides, environ=environ)
    key = getattr(cfg, section).endpoint.api_key
    return key.get_secret_value() if key else None


@pytest.mark.parametrize(
    "base_url,expected",
    [
        (None, OPENAI_KEY),  # OpenAI's own API
        ("https://api.openai.com/v1", OPENAI_KEY),
        ("http://localhost:8000/v1", None),  # another server: the default key never goes there
        ("https://llm.example.com/v1", None),
        ("http://api.openai.com/v1", None),  # not over plain HTTP either
    ],
)
def test_the_default_key_goes_only_to_openai(base_url: str | None, expected: str | None) -> None:
    overrides = [f"policy.endpoint.base_url={base_url}"] if base_url else []
    assert _key(overrides, {"OPENAI_API_KEY": OPENAI_KEY}) == expected


def test_a_named_key_goes_to_its_endpoint_only_and_not_in_clear_text_off_this_machine() -> None:
    env = {"OPENAI_API_KEY": OPENAI_KEY, "VLLM_KEY": "k-named"}
    named = ["llm.endpoint.api_key_env=VLLM_KEY"]
    assert _key([*named, "llm.endpoint.base_url=https://llm.example.com/v1"], env, "llm") == "k-named"
    assert _key([*named, "llm.endpoint.base_url=http://127.0.0.1:8000/v1"], env, "llm") == "k-named"
    assert (
        _key([*named, "llm.endpoint.base_url=http://127.0.0.1:8000/v1"], env, "policy") == OPENAI_KEY
    )  # the policy: OpenAI, its default
    with pytest.raises(ConfigError, match="clear text to 10.0.0.5.*llm.endpoint.allow_plain_http_key"):
        load_config(None, [*named, "llm.endpoint.base_url=http://10.0.0.5:8000/v1"], environ=env)
    allowed = [*named, "llm.endpoint.base_url=http://10.0.0.5:8000/v1", "llm.endpoint.allow_plain_http_key=true"]
    assert _key(allowed, env, "llm") == "k-named"


def test_a_policy_url_given_after_loading_is_checked_when_the_key_is_used() -> None:
    cfg = load_config(None, ["policy.endpoint.api_key_env=POL_KEY"], environ={"POL_KEY": "k-pol"})
    pol = apply_policy_spec(cfg, "http://10.0.0.5:8000/v1")
    with pytest.raises(ModelError, match="clear text"):
        make_policy(pol)  # refused before any request (no 5 s reachability wait on that host)


def test_collect_against_another_endpoint_never_sends_the_openai_key(tmp_path: Path) -> None:
    runner = CliRunner()
    base = [
        "--env",
        "shop",
        "--tasks",
        "shop-lookup-001",
        "--set",
        "rollouts.max_turns=1",
        "--set",
        f"workspace={tmp_path}",
    ]
    with FakeOpenAIServer(text_reply("done")) as srv:
        res = runner.invoke(
            app, ["rollouts", "collect", "--policy", srv.base_url, *base], env={"OPENAI_API_KEY": OPENAI_KEY}
        )
        assert res.exit_code == 0, res.output
        assert srv.authorizations and not any(OPENAI_KEY in (a or "") for a in srv.authorizations)
        named = runner.invoke(
            app,
            ["rollouts", "collect", "--policy", srv.base_url, *base, "--set", "policy.endpoint.api_key_env=MY_KEY"],
            env={"OPENAI_API_KEY": OPENAI_KEY, "MY_KEY": "k-mine"},
        )
        assert named.exit_code == 0, named.output
        assert srv.authorizations[-1] == "Bearer k-mine"


def test_a_url_with_a_password_is_refused_for_an_endpoint_with_the_password_masked() -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, [f"llm.endpoint.base_url=http://me:{PLANTED}@127.0.0.1:8000/v1"], environ={})
    assert "api_key_env" in str(ei.value) and PLANTED not in str(ei.value)
    with pytest.raises(UsageError) as ei2:
        apply_policy_spec(load_config(None, [], environ={}), f"http://me:{PLANTED}@127.0.0.1:8000/v1")
    assert PLANTED not in str(ei2.value)


def _scan(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]


def test_a_store_password_is_never_printed_or_stored(tmp_path: Path) -> None:
    """A planted PostgreSQL password in store.url: config show, an unreachable store's error, a run's
    stored config, a training spec file and a log line all mask it; the workspace and the store hold none."""
    runner = CliRunner()
    pg = f"postgresql+psycopg://gf:{PLANTED}@127.0.0.1:1/gapforge"
    shown = runner.invoke(app, ["config", "show", "--set", f"store.url={pg}"])
    assert shown.exit_code == 0 and "gf:***@127.0.0.1:1" in shown.output and PLANTED not in shown.output
    down = runner.invoke(
        app, ["rollouts", "show", "r-1", "--set", f"workspace={tmp_path}"], env={"GAPFORGE_STORE_URL": pg}
    )
    # without the postgres extra (psycopg) the store stops one step earlier, at its driver: that line masks it too
    failed = (
        "cannot open store"
        if importlib.util.find_spec("psycopg")
        else "no database driver for 'postgresql+psycopg://gf:***@"
    )
    assert down.exit_code == 2 and failed in down.output and PLANTED not in down.output, down.output

    cfg = load_config(None, [f"workspace={tmp_path}"], environ={"GAPFORGE_STORE_URL": pg})
    record = run_record("run", cfg, RunOptions())
    assert PLANTED not in repr(record)
    assert config_from_record(record, store_url=cfg.store.url).store.url == pg  # a resume reconnects to the same store

    from gapforge.training.envs import EnvSpec
    from gapforge.training.service import TrainJob

    job = TrainJob(
        name="c",
        base_model="m",
        env=EnvSpec(kind="sandbox", module="x.py"),
        out_dir=str(tmp_path),
        store_url=pg,
        run_id="r",
    )
    assert PLANTED not in job.model_dump_json()

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    try:
        install_log_redaction()
        logging.getLogger("gapforge.test").warning("connecting to %s", pg)
    finally:
        logging.getLogger().removeHandler(handler)
    assert "gf:***@" in stream.getvalue() and PLANTED not in stream.getvalue()


def test_a_collect_run_stores_no_password_anywhere(tmp_path: Path) -> None:
    """End to end on SQLite: a password planted in an endpoint URL of the config file ends up in
    neither the output, the workspace files nor the store's rows (the config is stored with the run)."""
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(
        f"evaluation:\n  trials: 1\ntraining:\n  vllm_server_base_url: http://me:{PLANTED}@127.0.0.1:9\n"
    )
    answers = tmp_path / "a.yaml"
    answers.write_text('policy:\n  repeat: "Hello there"\n')
    runner = CliRunner()
    ws = tmp_path / "ws"
    res = runner.invoke(
        app,
        [
            "rollouts",
            "collect",
            "-c",
            str(cfg_file),
            "--env",
            "shop",
            "--policy",
            f"scripted:{answers}",
            "--tasks",
            "shop-lookup-001",
            "--set",
            "rollouts.max_turns=1",
            "--set",
            f"workspace={ws}",
        ],
    )
    assert res.exit_code == 0, res.output
    assert PLANTED not in res.output
    assert _scan(ws) == []
    with sqlite3.connect(ws / "gapforge.db") as db:
        (config,) = db.execute("select config from runs").fetchone()
    assert "me:***@127.0.0.1" in config and PLANTED not in config


def test_redact_masks_only_the_password() -> None:
    assert (
        redact("postgresql://u:p/w@h:5432/db and http://localhost:8000/v1")
        == "postgresql://u:***@h:5432/db and http://localhost:8000/v1"
    )
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.postgres
def test_a_real_postgres_password_stays_out_of_the_store_the_workspace_and_the_output(
    postgres_url: str, tmp_path: Path
) -> None:
    """On the test PostgreSQL server (its URL carries a password): collect rollouts, show them, print
    the config; the password appears in no output, no workspace file and no text the store holds."""
    from sqlalchemy import create_engine, make_url, text

    url = make_url(postgres_url)
    password = url.password
    assert password, "the test server's URL has no password to plant"
    if password in url.render_as_string(hide_password=True):
        pytest.skip(
            "the test server's password also names another part of its URL (user, database or scheme): "
            "give it a distinct password to search for"
        )
    answers = tmp_path / "a.yaml"
    answers.write_text('policy:\n  repeat: "Hello there"\n')
    ws = tmp_path / "ws"
    env = {"GAPFORGE_STORE_URL": postgres_url}
    runner = CliRunner()
    made = runner.invoke(
        app,
        [
            "rollouts",
            "collect",
            "--env",
            "shop",
            "--policy",
            f"scripted:{answers}",
            "--tasks",
            "shop-lookup-001",
            "--set",
            "rollouts.max_turns=1",
            "--set",
            f"workspace={ws}",
        ],
        env=env,
    )
    assert made.exit_code == 0, made.output
    run_id = run_id_in(made.output)
    outputs = [made.output]
    for args in (["rollouts", "show", run_id], ["config", "show"], ["runs"]):
        res = runner.invoke(app, [*args, "--set", f"workspace={ws}"], env=env)
        outputs.append(res.output)
    assert all(password not in out for out in outputs)
    assert [p for p in ws.rglob("*") if p.is_file() and password.encode() in p.read_bytes()] == []
    from gapforge.store.models import Base

    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:  # every row of every table, as text
            held = {
                t: [r[0] for r in conn.execute(text(f"select cast(t as text) from {t} t"))]
                for t in Base.metadata.tables
            }
            config = conn.execute(text("select config::text from runs where id = :r"), {"r": run_id}).scalar_one()
    finally:
        engine.dispose()
    assert held["runs"] and not [t for t, rows in held.items() if any(password in row for row in rows)]
    assert ":***@" in config  # the stored config says where the store is, masked
