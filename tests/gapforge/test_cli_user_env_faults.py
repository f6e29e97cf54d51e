"""`gapforge rollouts collect` on a user's env that hangs or raises, as a real process: it finishes the other
episodes, records the stuck one as a `timeout` on the env, exits without hanging at shutdown (the stuck call's
thread is abandoned), and `--run` plays only what is missing; past the failure share it stops with exit 3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gapforge.store import Store

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests/data/faulty_env.py:FaultyEnv"  # a file path relative to where the command runs, as a user gives it
HARD_LIMIT_S = 90  # the process must exit well before this: a thread stuck in the env never holds it


def _cli(ws: Path, answers: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GAPFORGE_WORKSPACE": str(ws)}
    sets = ["rollouts.episode_timeout_s=0.5", "rollouts.max_turns=3"]
    argv = [sys.executable, "-m", "gapforge.cli", "rollouts", "collect", *args, "--policy", f"scripted:{answers}",
            *(a for s in sets for a in ("--set", s))]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=HARD_LIMIT_S, cwd=ROOT)


def _answers(tmp_path: Path) -> Path:
    path = tmp_path / "answers.yaml"
    path.write_text('policy:\n  repeat: "Done, handled."\n')
    return path


def _stored(ws: Path, run_id: str):
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as s:
        return {r.task_id: r for r in s.episodes(run_id)}, s.get_run(run_id)


def test_a_step_that_never_returns_times_out_the_rest_finish_and_a_resume_redoes_only_it(tmp_path: Path) -> None:
    ws, answers = tmp_path / "ws", _answers(tmp_path)
    first = _cli(ws, answers, "--env", SPEC, "--tasks", "ok-1,ok-2,ok-3,hang-step")
    assert first.returncode == 0, first.stdout + first.stderr  # one timeout is under the failure share
    run_id = first.stdout.splitlines()[0].split()[-1]
    assert "3 episodes ran, 0 already stored, 4 planned" in first.stdout
    warning = [line for line in first.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "1 episode(s) did not finish within rollouts.episode_timeout_s=0.5 s" in warning[0]
    assert "env.step did not return" in warning[0] and "waiting on the env's own code" in warning[0] and SPEC in warning[0]
    assert f"gapforge rollouts collect --run {run_id}" in warning[0] and "Traceback" not in first.stderr
    rows, run = _stored(ws, run_id)
    assert set(rows) == {"ok-1", "ok-2", "ok-3"} and all(r.termination == "done" for r in rows.values())
    assert run.status == "incomplete"  # not every planned episode is stored

    again = _cli(ws, answers, "--run", run_id)  # env, tasks: the run's
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 episodes ran, 3 already stored, 4 planned" in again.stdout  # only hang-step was played again
    assert "1 episode(s) did not finish" in again.stderr and "hang-step" not in _stored(ws, run_id)[0]


def test_an_env_that_fails_past_the_share_stops_with_exit_3_naming_it(tmp_path: Path) -> None:
    ws, answers = tmp_path / "ws", _answers(tmp_path)
    tasks = "raise-reset,raise-step,raise-score,hang-step,ok-1"
    first = _cli(ws, answers, "--env", SPEC, "--tasks", tasks, "--concurrency", "1")  # in order: 3 env errors of 5 > 0.5
    assert first.returncode == 3, first.stdout + first.stderr
    run_id = first.stdout.splitlines()[0].split()[-1]
    errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"env '{SPEC}' failed 3 of the 5 planned episodes (env_error=3)" in errors[0]
    assert "last: env.score failed: ValueError: no score for raise-score" in errors[0]
    assert f"resume with `gapforge rollouts collect --run {run_id}`" in errors[0] and "Traceback" not in first.stderr
    rows, run = _stored(ws, run_id)
    assert set(rows) == {"raise-reset", "raise-step", "raise-score"} and run.status == "incomplete"

    again = _cli(ws, answers, "--run", run_id, "--set", "rollouts.max_env_failure_share=1.0")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 episodes ran, 3 already stored, 5 planned" in again.stdout and "1 episode(s) did not finish" in again.stderr
    assert set(_stored(ws, run_id)[0]) == {"raise-reset", "raise-step", "raise-score", "ok-1"}
