"""Rollout collection under infrastructure faults, through the CLI: an endpoint with injected
500s / 429+Retry-After / non-JSON 200s / hangs and then a full outage leaves every episode
either stored (finished) or not stored (resumable), exits 3 naming the count and the resume
command, and a resume completes the run; no stored episode blames the model for a server
fault. A run refuses work that does not belong to it, and one process at a time works on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_helpers import run_id_in
from pytest import MonkeyPatch
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.envs.breaker import reset_breakers
from gapforge.serving import openai_policy
from gapforge.store import Store
from tests.fakes.fake_openai import FakeOpenAIServer, Faults, text_reply

ROOT = Path(__file__).parents[2]
TASKS = ",".join(f"shop-lookup-00{i}" for i in range(1, 7))


def _fast(tmp_path: Path) -> list[str]:
    sets = [
        f"workspace={tmp_path}",
        "rollouts.max_turns=3",
        "policy.endpoint.timeout_s=1.5",  # a reply here takes milliseconds: the margin is for a loaded host
        "policy.endpoint.max_retries=3",
        "policy.endpoint.retry_backoff_s=0.01",
    ]
    return [a for s in sets for a in ("--set", s)]


def _episodes(tmp_path: Path, run_id: str):
    with Store(f"sqlite:///{tmp_path / 'gapforge.db'}") as s:
        return s.episodes(run_id), s.get_run(run_id)


def test_outage_mid_run_is_resumable_and_never_blamed_on_the_model(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    monkeypatch.setattr(openai_policy, "BREAKER_FAILURES", 6)
    monkeypatch.setattr(openai_policy, "BREAKER_COOLDOWN_S", 0.3)
    runner = CliRunner()
    faults = Faults(rate_limit_rate=0.05, retry_after_s=0.05, garbage_rate=0.05, hang_rate=0.03, hang_s=2.0)
    with FakeOpenAIServer(text_reply("Sorry, I cannot look that up."), fail_rate=0.2, faults=faults, seed=7) as srv:
        answer = srv.responder

        def outage_after_25(req: dict) -> dict:
            if srv.request_count >= 25:
                srv.set_down(True)  # the whole endpoint goes away mid-run
            return answer(req)

        srv.responder = outage_after_25
        args = [
            "rollouts",
            "collect",
            "--env",
            "shop",
            "--policy",
            srv.base_url,
            "--tasks",
            TASKS,
            "--samples",
            "2",
            "--concurrency",
            "4",
        ]
        first = runner.invoke(app, [*args, *_fast(tmp_path)])
        assert first.exit_code == 3, first.output
        run_id = run_id_in(first.output)
        error = [line for line in first.output.splitlines() if line.startswith("error:")]
        assert len(error) == 1 and "infrastructure failures" in error[0] and "endpoint_error=" in error[0]
        assert f"gapforge rollouts collect --run {run_id}" in first.output and "Traceback" not in first.output
        stored, row = _episodes(tmp_path, run_id)
        missing = int(error[0].split("error: ")[1].split(" of ")[0])
        assert len(stored) + missing == 12 and missing > 0 and row.status == "incomplete"
        assert set(srv.injected) >= {"fail", "down"}
        srv.set_down(False)  # recovery
        srv.responder = answer
        reset_breakers()  # each `gapforge rollouts collect` is a new process: no breaker still cooling down from the outage
        for _ in range(4):  # faults go on at 33%: a resume may leave a few again, never lose any
            again = runner.invoke(
                app, ["rollouts", "collect", "--run", run_id, *_fast(tmp_path)]
            )  # env, policy, tasks: the run's
            assert again.exit_code in (0, 3) and "Traceback" not in again.output, again.output
            if again.exit_code == 0:
                break
        assert again.exit_code == 0, again.output
    stored, row = _episodes(tmp_path, run_id)
    assert len(stored) == 12 and len({(e.task_id, e.sample) for e in stored}) == 12 and row.status == "done"
    assert {e.termination for e in stored} <= {"done", "max_turns"}  # no endpoint_error, no malformed_output stored


def test_a_run_refuses_foreign_work_and_a_second_collector(tmp_path: Path) -> None:
    runner = CliRunner()
    answers = tmp_path / "a.yaml"
    answers.write_text('policy:\n  repeat: "Hello there"\n')
    base = ["--set", f"workspace={tmp_path}", "--set", "rollouts.max_turns=1"]
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
            *base,
        ],
    )
    assert made.exit_code == 0, made.output
    run_id = run_id_in(made.output)
    with FakeOpenAIServer(text_reply("hi")) as srv:
        foreign = runner.invoke(app, ["rollouts", "collect", "--run", run_id, "--policy", srv.base_url, *base])
    assert foreign.exit_code == 2 and "not policy 'endpoint:" in foreign.output and "start a new run" in foreign.output
    other_env = runner.invoke(app, ["rollouts", "collect", "--run", run_id, "--env", "synthetic:x", *base])
    assert other_env.exit_code == 2 and "Traceback" not in other_env.output
    stored, _ = _episodes(tmp_path, run_id)
    assert len(stored) == 1  # nothing foreign appended

    # a second collector on the same run while the first works: refused, naming the holder
    with FakeOpenAIServer(text_reply("slow"), latency_s=0.25) as srv:
        slow = [*base, "--set", "rollouts.max_turns=2"]
        cmd = [
            sys.executable,
            "-m",
            "gapforge.cli",
            "rollouts",
            "collect",
            "--env",
            "shop",
            "--policy",
            srv.base_url,
            "--tasks",
            TASKS,
            "--concurrency",
            "2",
            *slow,
        ]
        first = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = first.stdout.readline()
        run2 = line.split()[-1]
        while srv.request_count == 0 and first.poll() is None:
            pass
        second = runner.invoke(app, ["rollouts", "collect", "--run", run2, *slow])
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        after = runner.invoke(app, ["rollouts", "collect", "--run", run2, *slow])  # the work was done once
    assert second.exit_code == 2 and f"run '{run2}' is in use by `rollouts collect` (pid {first.pid}" in second.output
    stored, _ = _episodes(tmp_path, run2)
    assert len(stored) == 6
    assert after.exit_code == 0 and "0 episodes ran, 6 already stored" in after.output, after.output


def test_task_lists_and_limits_are_checked_before_work(tmp_path: Path) -> None:
    runner = CliRunner()
    answers = tmp_path / "a.yaml"
    answers.write_text('policy:\n  repeat: "Hello"\n')
    base = [
        "--env",
        "shop",
        "--policy",
        f"scripted:{answers}",
        "--set",
        f"workspace={tmp_path}",
        "--set",
        "rollouts.max_turns=1",
    ]
    twice = runner.invoke(app, ["rollouts", "collect", "--tasks", "shop-lookup-001,shop-lookup-001", *base])
    assert twice.exit_code == 0 and "1 episodes ran" in twice.output and "1 planned" in twice.output
    empty = runner.invoke(app, ["rollouts", "collect", "--tasks", ",", *base])
    assert empty.exit_code == 2 and "names no task" in empty.output
    huge = runner.invoke(app, ["rollouts", "collect", "--concurrency", "100000", *base])
    assert huge.exit_code == 2 and "concurrency" in huge.output and "Traceback" not in huge.output
    for bad in ("http://", "http://[::1"):
        res = runner.invoke(
            app, ["rollouts", "collect", "--env", "shop", "--policy", bad, "--set", f"workspace={tmp_path}"]
        )
        assert res.exit_code == 2 and "not" in res.output and "unreachable" not in res.output, res.output


def test_an_outage_is_not_counted_as_finished_and_the_exit_line_keeps_the_whole_error(
    tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    """The progress bar counts stored episodes only, and the exit-3 line quotes the last error whole."""
    monkeypatch.setattr(openai_policy, "BREAKER_FAILURES", 1000)
    with FakeOpenAIServer(text_reply("ok"), fail_rate=1.0) as srv:
        long_url = (
            srv.base_url.removesuffix("/v1") + "/" + "a-long-proxy-path" * 12 + "/v1"
        )  # the error quotes it: > 200 characters
        res = runner.invoke(
            app,
            [
                "rollouts",
                "collect",
                "--env",
                "shop",
                "--policy",
                long_url,
                "--tasks",
                "shop-lookup-001,shop-lookup-002",
                "--samples",
                "2",
                *_fast(tmp_path),
            ],
            terminal_width=2000,
        )
    assert res.exit_code == 3, res.output
    assert "0/4" in res.output and "4/4" not in res.output  # nothing finished: every episode is redone by a resume
    error = next(line for line in res.output.splitlines() if line.startswith("error:"))
    last = error.split("; last: ", 1)[1]
    assert len(last) > 200 and 'server_error"}}' in last  # the endpoint's whole answer, no longer cut at 200 characters


runner = CliRunner()
