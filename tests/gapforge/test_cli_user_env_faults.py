"""`gapforge rollouts collect` on a user's env that hangs or raises, as a real process: it finishes the other
episodes, records the stuck one as a `timeout` on the env, exits without hanging at shutdown (the stuck call's
thread is abandoned), and `--run` plays what is missing and what the env's code failed; past the failure share it stops
with exit 4 (the env's boundary). A user who fixes their env and resumes ends with no `env_error`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_helpers import run_id_in

from gapforge.store import Store

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests/data/faulty_env.py:FaultyEnv"  # a file path relative to where the command runs, as a user gives it
HARD_LIMIT_S = 90  # the process must exit well before this: a thread stuck in the env never holds it


def _cli(ws: Path, answers: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GAPFORGE_WORKSPACE": str(ws)}
    sets = ["rollouts.episode_timeout_s=0.5", "rollouts.max_turns=3"]
    argv = [
        sys.executable,
        "-m",
        "gapforge.cli",
        "rollouts",
        "collect",
        *args,
        "--policy",
        f"scripted:{answers}",
        *(a for s in sets for a in ("--set", s)),
    ]
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
    first = _cli(ws, answers, "--env", SPEC, "--tasks", "ok-1,ok-2,ok-3,hang-step", "--set", "rollouts.heartbeat_s=0.1")
    assert first.returncode == 0, first.stdout + first.stderr  # one timeout is under the failure share
    run_id = run_id_in(first.stdout)
    # not a terminal: while hang-step hangs, a heartbeat line says what runs and for how long
    beats = [line for line in first.stdout.splitlines() if line.startswith("collect: ")]
    assert any(  # any beat: a slow machine may print one more after the timeout ("4/4 episodes finished, 0 running")
        "3/4 episodes finished, 1 running (longest: hang-step#0," in beat and "of its 0.5 s limit)" in beat
        for beat in beats
    ), first.stdout
    assert "3 episodes ran, 0 already stored, 4 planned" in first.stdout
    warning = [line for line in first.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "1 episode(s) did not finish within the episode time limit of 0.5 s" in warning[0]
    assert (
        "env.step did not return" in warning[0] and "waiting on the env's own code" in warning[0] and SPEC in warning[0]
    )
    assert f"gapforge rollouts collect --run {run_id}" in warning[0] and "Traceback" not in first.stderr
    rows, run = _stored(ws, run_id)
    assert set(rows) == {"ok-1", "ok-2", "ok-3"} and all(r.termination == "done" for r in rows.values())
    assert run.status == "incomplete"  # not every planned episode is stored

    again = _cli(ws, answers, "--run", run_id)  # env, tasks: the run's
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 episodes ran, 3 already stored, 4 planned" in again.stdout  # only hang-step was played again
    assert "1 episode(s) did not finish" in again.stderr and "hang-step" not in _stored(ws, run_id)[0]


def test_an_env_that_fails_past_the_share_stops_with_exit_4_naming_it(tmp_path: Path) -> None:
    ws, answers = tmp_path / "ws", _answers(tmp_path)
    tasks = "raise-reset,raise-step,raise-score,hang-step,ok-1"
    first = _cli(
        ws, answers, "--env", SPEC, "--tasks", tasks, "--concurrency", "1"
    )  # in order: 3 env errors of 5 > 0.5
    assert first.returncode == 4, first.stdout + first.stderr  # the env's code, not the infrastructure (3)
    run_id = run_id_in(first.stdout)
    errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"env '{SPEC}' failed 3 of the 5 planned episodes (env_error=3)" in errors[0]
    assert "last: env.score failed: ValueError: no score for raise-score (at " in errors[0]
    assert (
        f"fix the env's code, then `gapforge rollouts collect --run {run_id}` plays the failed and unplayed episodes again"
        in errors[0]
    )
    assert "Traceback" not in first.stderr
    rows, run = _stored(ws, run_id)
    assert set(rows) == {"raise-reset", "raise-step", "raise-score"} and run.status == "incomplete"

    again = _cli(ws, answers, "--run", run_id, "--set", "rollouts.max_env_failure_share=1.0")
    assert again.returncode == 0, again.stdout + again.stderr
    # the env is unchanged: its three env errors are played again (and fail again), ok-1 runs, hang-step times out
    assert (
        "4 episodes ran (3 env_error episodes of an earlier call played again), 0 already stored, 5 planned"
        in again.stdout
    )
    assert "1 episode(s) did not finish" in again.stderr
    assert set(_stored(ws, run_id)[0]) == {"raise-reset", "raise-step", "raise-score", "ok-1"}


BROKEN_DESK = """
from gapforge.protocol import Message, Score, StepResult, tool_schema

BROKEN = {"t-02", "t-05", "t-09"}


class Desk:
    def task_ids(self):
        return [f"t-{i:02d}" for i in range(1, 14)]

    def task_family(self, task_id):
        return "desk"

    def tools(self):
        return [tool_schema("noop", "Does nothing.", {})]

    def reset(self, task):
        if task in BROKEN:
            raise KeyError(f"no patient row for {task}")
        return [Message.system("Answer."), Message.user("Hello.")]

    def step(self, message):
        return StepResult(messages=[Message.user("Thanks.")], done=True)

    def score(self):
        return Score(reward=1.0, success=True)

    def close(self):
        pass
"""


def test_env_errors_below_the_share_warn_and_a_resume_after_the_fix_plays_them_again(tmp_path: Path) -> None:
    """A `reset` that raises on 3 of 13 tasks: exit 0 with one `warning:` line naming the count and the first error; the
    user fixes the env and resumes with the line the warning gives: those episodes are played again, none is env_error."""
    ws, answers, env_file = tmp_path / "ws", _answers(tmp_path), tmp_path / "desk.py"
    env_file.write_text(BROKEN_DESK)
    spec = f"{env_file}:Desk"
    first = _cli(ws, answers, "--env", spec, "--concurrency", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    run_id = run_id_in(first.stdout)
    warning = [line for line in first.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, first.stderr
    assert warning[0].startswith("warning: 3 of 13 episodes ended in env_error (the env's own code raised")
    assert f"first: t-02#0: env.reset failed: KeyError: 'no patient row for t-02' (at {env_file}:" in warning[0]
    assert f"`gapforge rollouts collect --run {run_id}` plays them again" in warning[0]
    assert sorted(t for t, r in _stored(ws, run_id)[0].items() if r.termination == "env_error") == [
        "t-02",
        "t-05",
        "t-09",
    ]

    env_file.write_text(BROKEN_DESK.replace('{"t-02", "t-05", "t-09"}', "set()"))  # the user's fix
    again = _cli(ws, answers, "--run", run_id)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        "3 episodes ran (3 env_error episodes of an earlier call played again), 10 already stored, 13 planned"
        in again.stdout
    )
    assert "ended in env_error" not in again.stderr and "changed since the run stored episodes" in again.stderr, (
        again.stderr
    )
    rows, run = _stored(ws, run_id)
    assert (
        len(rows) == 13 and all(r.termination == "done" and r.success for r in rows.values()) and run.status == "done"
    )
