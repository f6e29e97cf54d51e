"""Commands that read a run take its stored config (gapforge/run_config.py): flags and `--set` override it and the
one `override:` line names what changed; where the command works (workspace, store, executor) is its own; a
`rollouts collect` run's --env / --policy are part of its config; a run stored without a config uses the
invocation's and says so; a stored config this version cannot load is refused with one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.run_config import resolve
from gapforge.run_session import RunOptions, create_run, run_record
from gapforge.store import Store

COLUMNS = {"COLUMNS": "200"}


def _graph_run(workspace: Path, *settings: str) -> str:
    cfg = load_config(
        None, [f"workspace={workspace}", "stages=fixtures", *settings], environ={}
    )  # fixtures: no base model needed
    with Store(cfg.store_url) as store:
        return create_run(store, "trace", "run", cfg, RunOptions())


def test_a_command_prints_one_line_naming_what_it_overrode(workspace: Path) -> None:
    run = _graph_run(workspace, "routing.backend=gate", "evaluation.trials=3")
    ws = ["--set", f"workspace={workspace}"]
    same = CliRunner().invoke(app, ["adapters", run, *ws], env=COLUMNS)
    assert same.exit_code == 0, same.output
    assert "override" not in same.output and "routing.backend=gate" in same.output
    changed = CliRunner().invoke(
        app,
        ["adapters", run, *ws, "--set", "routing.backend=transformers", "--set", "evaluation.trials=5"],
        env=COLUMNS,
    )
    assert changed.exit_code == 0, changed.output
    lines = [line for line in changed.output.splitlines() if line.startswith("override:")]
    assert lines == ["override: routing.backend=transformers (run: gate); evaluation.trials=5 (run: 3)"]
    bad = CliRunner().invoke(app, ["adapters", run, *ws, "--set", "routing.backend=nope"])
    assert bad.exit_code == 2 and "routing.backend" in bad.output and "Traceback" not in bad.output


def test_where_a_command_works_is_its_own_and_a_config_file_overrides_only_its_keys(
    workspace: Path, tmp_path: Path
) -> None:
    run = _graph_run(workspace, "routing.backend=gate", "executor.local_rollout_workers=3", "seed=7")
    where = load_config(None, [f"workspace={workspace}"], environ={})
    with Store(where.store_url) as store:
        record = dict(store.get_run(run).config)
    plain = resolve(record, run, where, None)
    assert plain.overridden == [] and plain.cfg.seed == 7 and plain.cfg.executor.local_rollout_workers is None
    assert plain.cfg.store_url == where.store_url
    file = tmp_path / "c.yaml"
    file.write_text("routing:\n  margin: 0.25\n")
    layered = resolve(record, run, where, str(file))
    assert layered.cfg.routing.backend == "gate" and layered.cfg.seed == 7  # the file's one key changes one setting
    assert layered.lines() == ["override: routing.margin=0.25 (run: 0.0)"]


def test_a_rollouts_run_is_read_with_its_env_and_policy(workspace: Path, tiny_model_dir: Path) -> None:
    invocation = load_config(None, [f"workspace={workspace}"], environ={})
    record = {
        "command": "rollouts collect",
        "env": "tau2:retail",
        "policy": "tiny",
        "policy_spec": str(tiny_model_dir),
        "tasks": ["1"],
        "samples": 1,
        "config": invocation.dump(),
    }
    resolved = resolve(record, "r-1", invocation, None)
    assert resolved.overridden == [] and resolved.cfg.rollouts.env == "tau2:retail"
    assert resolved.cfg.policy.kind == "local" and resolved.cfg.policy.local_path == str(tiny_model_dir)


def test_a_run_without_a_stored_config_uses_the_invocation_s_and_says_so(workspace: Path) -> None:
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        old = store.create_run("trace", {})
        stale = store.create_run(
            "trace", run_record("run", load_config(None, [f"workspace={workspace}"], environ={}), RunOptions())
        )
    res = CliRunner().invoke(
        app, ["adapters", old, "--set", f"workspace={workspace}", "--set", "routing.backend=gate"], env=COLUMNS
    )
    assert res.exit_code == 0, res.output
    assert (
        f"run {old} stores no config" in res.output
        and "routing.backend=gate" in res.output
        and "override" not in res.output
    )
    with Store(
        f"sqlite:///{workspace / 'gapforge.db'}"
    ) as store:  # a key this version does not know (a newer or older gapforge's)
        from sqlalchemy import update

        from gapforge.store.models import Run

        record = dict(store.get_run(stale).config)
        record["config"] = {**record["config"], "retired_section": {"x": 1}}
        with store._write() as session:
            session.execute(update(Run).where(Run.id == stale).values(config=record))
    res = CliRunner().invoke(app, ["adapters", stale, "--set", f"workspace={workspace}"])
    assert res.exit_code == 2 and "stored config does not load" in res.output and "retired_section" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_a_stored_url_whose_password_was_masked_is_taken_from_the_invocation_or_refused(
    workspace: Path, tmp_path: Path
) -> None:
    secret = "http://gapforge:s3cret@vllm.internal:8000"  # endpoint base_urls refuse a password: this one takes it
    made = load_config(None, [f"workspace={workspace}", f"training.vllm_server_base_url={secret}"], environ={})
    record = {"command": "run", "config": made.dump()}  # stored as http://gapforge:***@vllm.internal:8000
    where = load_config(None, [f"workspace={workspace}"], environ={})
    refused = CliRunner().invoke(app, ["adapters", _stored(workspace, record), "--set", f"workspace={workspace}"])
    assert (
        refused.exit_code == 2 and "Traceback" not in refused.output and len(refused.output.strip().splitlines()) == 1
    )
    assert (
        "training.vllm_server_base_url" in refused.output and "--config" in refused.output and "--set" in refused.output
    )
    assert (
        resolve(
            record, "r-1", where, None, [f"training.vllm_server_base_url={secret}"]
        ).cfg.training.vllm_server_base_url
        == secret
    )
    file = tmp_path / "c.yaml"
    file.write_text(f"training:\n  vllm_server_base_url: {secret}\n")
    given = resolve(record, "r-1", load_config(str(file), [f"workspace={workspace}"], environ={}), str(file))
    assert (
        given.cfg.training.vllm_server_base_url == secret and given.overridden == []
    )  # the same setting: nothing overridden


def _stored(workspace: Path, record: dict) -> str:
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        return store.create_run("trace", record)


def test_a_run_stored_with_the_removed_routing_keys_unset_loads_and_one_that_set_them_is_refused(
    workspace: Path,
) -> None:
    """routing.vllm_base_url / vllm_model / timeout_s (gone: the label scorer reads policy.endpoint) in a run stored
    before they went: at the values they had unset they carry nothing and are dropped; set, the run is refused in one
    line naming what replaces them."""
    from sqlalchemy import update

    from gapforge.store.models import Run

    unset, was_set = _graph_run(workspace), _graph_run(workspace)
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        for run, base_url in ((unset, None), (was_set, "http://gpu-box:8000/v1")):
            record = dict(store.get_run(run).config)
            routing = {**record["config"]["routing"], "vllm_base_url": base_url, "vllm_model": None, "timeout_s": 30.0}
            record["config"] = {**record["config"], "routing": routing}
            with store._write() as session:
                session.execute(update(Run).where(Run.id == run).values(config=record))
    ok = CliRunner().invoke(app, ["adapters", unset, "--set", f"workspace={workspace}"], env=COLUMNS)
    assert ok.exit_code == 0, ok.output
    refused = CliRunner().invoke(app, ["adapters", was_set, "--set", f"workspace={workspace}"], env=COLUMNS)
    assert refused.exit_code == 2 and "routing.vllm_base_url' was removed" in refused.output, refused.output
    assert "policy.endpoint.base_url" in refused.output and len(refused.output.strip().splitlines()) == 1
