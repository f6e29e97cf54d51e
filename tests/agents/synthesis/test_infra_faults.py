"""The fault run of issue 23: the policy endpoint answers 500 to every request during `gapforge
synthesize` -> exit 3 with the resume command, no attempt is recorded as failed because of it,
and a resume after the endpoint recovers accepts the env. (Recorded generator, the process
sandbox backend, the fake OpenAI server as the readiness policy.)"""

from __future__ import annotations

from pathlib import Path

from synth_fixtures import analysed_run, store_at
from typer.testing import CliRunner

from gapforge.cli import app
from tests.fakes.fake_openai import FakeOpenAIServer, text_reply

CAP = "precondition_verification"


def _sets(ws: Path, url: str) -> list[str]:
    pairs = [
        f"workspace={ws}",
        "sandbox.backend=process",
        "synthesis.max_attempts=3",
        "synthesis.validation_seeds=8",
        "policy.kind=endpoint",
        f"policy.endpoint.base_url={url}",
        "policy.endpoint.max_retries=0",
        "policy.endpoint.retry_backoff_s=0",
        "rollouts.max_turns=3",
        # any reward distribution is ready: this test is about who is blamed, not about calibration
        "grpo_readiness.groups=2",
        "grpo_readiness.samples=2",
        "grpo_readiness.min_informative=0",
        "grpo_readiness.max_all_zero=1",
        "grpo_readiness.max_all_perfect=1",
        "grpo_readiness.mean_low=0",
    ]
    return [a for p in pairs for a in ("--set", p)]


def test_an_endpoint_outage_during_synthesis_stops_with_exit_3_and_a_resume_accepts(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    runner = CliRunner()
    with FakeOpenAIServer(text_reply("Sorry, I cannot help with that."), fail_rate=1.0) as srv:
        down = runner.invoke(
            app, ["synthesize", run, "--capability", CAP, *_sets(tmp_path, srv.base_url)], terminal_width=250
        )
        outage_requests = srv.request_count
    assert down.exit_code == 3, down.output
    errors = [line for line in down.output.splitlines() if line.startswith("error:")]
    assert (
        len(errors) == 1
        and "the endpoint kept failing" in errors[0]
        and f"resume with `gapforge synthesize {run}`" in errors[0]
    )
    assert "unsynthesized" not in down.output and outage_requests > 0
    rows = store.synthetic_envs(run, CAP)
    verdicts = {r.attempt: store.get_validation(r.id) for r in rows}
    last = max(verdicts)
    assert verdicts[last] is None and rows[-1].status == "generated"  # the attempt readiness was on: no verdict at all
    for attempt, stored in verdicts.items():  # the attempts that have one were decided by the env's own checks
        if stored is not None:
            assert "grpo_ready" not in stored.report["verdict"]["failed_checks"], (attempt, stored.report["verdict"])

    with FakeOpenAIServer(text_reply("Sorry, I cannot help with that.")) as srv:  # the endpoint is back
        back = runner.invoke(
            app, ["synthesize", run, "--capability", CAP, *_sets(tmp_path, srv.base_url)], terminal_width=250
        )
        assert srv.request_count > 0
    assert back.exit_code == 0, back.output
    assert f"{CAP} attempt {last}: accepted" in back.output
    rows = {r.attempt: r for r in store.synthetic_envs(run, CAP)}
    assert rows[last].status == "accepted" and len(rows) == last  # the same attempt, validated again: no new generation
    store.close()
