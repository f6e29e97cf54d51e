"""Your own agent through the CLI: `rollouts tasks` / `rollouts collect` on a class outside the package, the run's
target record, a changed env refused on `--run` (a changed source only warns), bad specs as one line with exit 2
and nothing stored lost, and `run --resume` refusing a changed env."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from cli_helpers import one_line_error as _one_line_error
from cli_helpers import run_id_in
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.store import Store

DATA = Path(__file__).resolve().parents[1] / "data"
runner = CliRunner()


@pytest.fixture
def desk(tmp_path: Path) -> Path:
    """A copy of the user's env folder that a test may edit."""
    shutil.copytree(DATA / "your_env", tmp_path / "your_env")
    return tmp_path / "your_env" / "desk_env.py"


@pytest.fixture
def answers(tmp_path: Path) -> Path:
    path = tmp_path / "unlock.yaml"  # a degenerate policy: unlock u-17 whatever is asked, then say it is done
    pair = (
        "  - tool_calls: [{name: unlock_account, arguments: {account: u-17}}]\n  - Done.\n"  # answers are used in order
    )
    path.write_text("policy:\n" + pair * 20)
    return path


def _collect(tmp_path: Path, *args: str):
    return runner.invoke(
        app, ["rollouts", "collect", *args, "--set", f"workspace={tmp_path / 'ws'}", "--set", "rollouts.concurrency=1"]
    )


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'ws' / 'gapforge.db'}")


def test_tasks_lists_a_file_env_with_its_families(desk: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["rollouts", "tasks", f"{desk}:DeskEnv", "--set", f"workspace={tmp_path / 'ws'}"])
    assert res.exit_code == 0, res.output
    assert [line.split() for line in res.output.splitlines()] == [
        ["desk-reset-001", "password_reset"],
        ["desk-reset-002", "password_reset"],
        ["desk-unlock-001", "unlock"],
    ]


def test_collect_stores_episodes_spec_and_fingerprint(desk: Path, answers: Path, tmp_path: Path) -> None:
    spec = f"{desk}:DeskEnv"
    res = _collect(tmp_path, "--env", spec, "--policy", f"scripted:{answers}")
    assert res.exit_code == 0, res.output
    run_id = run_id_in(res.output)
    with _store(tmp_path) as store:
        episodes = store.episodes(run_id)
        target = store.run_target(run_id)
    assert {(e.env, e.task_id) for e in episodes} == {
        (spec, t) for t in ("desk-reset-001", "desk-reset-002", "desk-unlock-001")
    }
    assert {e.task_id: e.success for e in episodes} == {
        "desk-reset-001": False,
        "desk-reset-002": False,
        "desk-unlock-001": True,
    }
    assert target is not None and target["spec"] == spec and target["tasks"] == 3
    assert target["tool_names"] == ["reset_password", "unlock_account"] and len(target["tools_sha256"]) == 64
    assert target["source"] == str(desk) and target["source_sha256"] == hashlib.sha256(desk.read_bytes()).hexdigest()
    shown = runner.invoke(app, ["rollouts", "show", run_id, "--set", f"workspace={tmp_path / 'ws'}"])
    assert shown.exit_code == 0 and f"target: {spec} (2 tools" in shown.output.replace("\n", "")


def test_a_changed_task_set_refuses_the_run_and_a_changed_source_only_warns(
    desk: Path, answers: Path, tmp_path: Path
) -> None:
    spec = f"{desk}:DeskEnv"
    first = _collect(tmp_path, "--env", spec, "--policy", f"scripted:{answers}", "--tasks", "desk-reset-001")
    assert first.exit_code == 0, first.output
    run_id = run_id_in(first.output)
    with _store(tmp_path) as store:
        before = [(e.id, e.task_id, e.reward) for e in store.episodes(run_id)]
        recorded = store.run_target(run_id)

    desk.write_text(desk.read_text() + "\n# a comment: same tools, same tasks\n")
    warned = _collect(tmp_path, "--run", run_id)
    assert warned.exit_code == 0, warned.output
    assert "warning: env" in warned.output and "source" in warned.output and "changed" in warned.output, warned.output

    desk.write_text(
        desk.read_text().replace(
            "\n\nclass DeskEnv",
            '\nTASKS = {**TASKS, "desk-unlock-002": ("unlock", "Unlock u-9.", "u-9")}\n\nclass DeskEnv',
        )
    )
    line = _one_line_error(_collect(tmp_path, "--run", run_id), "its task set changed (3 tasks then, 4 now")
    assert "--allow-env-change" in line
    with _store(tmp_path) as store:
        after = [(e.id, e.task_id, e.reward) for e in store.episodes(run_id)]
        assert after == before, (before, after)  # nothing stored is lost
        assert store.run_target(run_id)["tasks"] == 3, store.run_target(run_id)  # the refused env was not recorded

    allowed = _collect(tmp_path, "--run", run_id, "--allow-env-change")
    assert allowed.exit_code == 0 and "going on as --allow-env-change asks" in allowed.output, allowed.output
    with _store(tmp_path) as store:
        run = store.get_run(run_id)
    assert run.config["target"]["tasks"] == 4, run.config["target"]
    history = run.config["target_history"]
    assert history[0]["tools_sha256"] == recorded["tools_sha256"] and "source" in history[0]["replaced_because"], (
        history
    )
    assert history[-1]["tasks"] == 3 and "task set changed" in history[-1]["replaced_because"], history


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("nope", "unknown env 'nope': known envs are shop"),
        ("{data}/missing.py:Env", "missing.py' not found"),
        ("no_such_pkg.mod:Env", "module 'no_such_pkg.mod' not found"),
        ("{data}/broken_envs.py:Nope", "has no 'Nope'"),
        ("{data}/broken_envs.py:NOT_A_CLASS", "is a int, not a class"),
        ("{data}/broken_envs.py:ResetWithoutTask", "called as reset(task)"),
        ("{data}/broken_envs.py:NoTasks", "return a non-empty list of task id strings"),
        ("{data}/broken_envs.py:ToolsNotSchemas", "tool_schema"),
        ("{data}/broken_envs.py:RaisesInInit", "raised RuntimeError: database file missing: fix the env's code"),
    ],
)
def test_a_bad_spec_is_one_line_and_exit_2_with_nothing_stored_lost(
    spec: str, needle: str, desk: Path, answers: Path, tmp_path: Path
) -> None:
    kept = _collect(
        tmp_path, "--env", f"{desk}:DeskEnv", "--policy", f"scripted:{answers}", "--tasks", "desk-unlock-001"
    )
    assert kept.exit_code == 0, kept.output
    _one_line_error(_collect(tmp_path, "--env", spec.format(data=DATA), "--policy", f"scripted:{answers}"), needle)
    with _store(tmp_path) as store:
        runs = store.list_runs()
        assert len(runs) == 1 and [e.task_id for e in store.episodes(runs[0].id)] == ["desk-unlock-001"]  # no run made


def test_run_resume_refuses_a_changed_env_unless_allowed(desk: Path, tmp_path: Path) -> None:
    import yaml

    from gapforge.config import load_config
    from gapforge.stages.rollouts import resume_target_check

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "workspace": str(tmp_path / "ws"),
                "stages": "fixtures",
                "analysis": {"passes": 2, "min_passes": 2},
                "rollouts": {"env": f"{desk}:DeskEnv", "env_args": {"split": "all"}},
            }
        )
    )
    done = runner.invoke(app, ["run", "--config", str(config)])
    assert done.exit_code == 0, done.output
    run_id = done.output.splitlines()[0].split()[1]
    cfg = load_config(config)
    with _store(tmp_path) as store:
        assert (
            resume_target_check(cfg, store, run_id, allow_change=False) == []
        )  # nothing recorded yet: nothing to check
        from gapforge.stages.rollouts import check_run_target, target_record
        from gapforge.wiring import make_target_env_factory

        probe, _ = make_target_env_factory(cfg, cfg.rollouts.env)
        check_run_target(
            store, run_id, target_record(probe, cfg.rollouts.env), allow_change=False
        )  # as its collection records it
    state = runner.invoke(app, ["state", run_id, "--config", str(config)])
    assert state.exit_code == 0 and f"target: {desk}:DeskEnv?split=all (2 tools" in state.output.replace("\n", ""), (
        state.output
    )

    desk.write_text(desk.read_text().replace('tool_schema("unlock_account"', 'tool_schema("unlock_user"'))
    _one_line_error(
        runner.invoke(app, ["run", "--config", str(config), "--resume", run_id]),
        "its tool schemas changed (+unlock_user, -unlock_account)",
    )
    resumed = runner.invoke(app, ["run", "--config", str(config), "--resume", run_id, "--allow-env-change"])
    assert resumed.exit_code == 0 and "going on as --allow-env-change asks" in resumed.output, resumed.output
    with _store(tmp_path) as store:
        assert store.run_target(run_id)["tool_names"] == ["reset_password", "unlock_user"]
