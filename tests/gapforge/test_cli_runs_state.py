"""`gapforge runs` lists `rollouts collect` runs beside the graph runs (kind, env, episodes; whole ids), and `gapforge
state` shows the stage that failed or is in flight, never a finished stage's last progress line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_id_in
from rich.console import Console
from typer.testing import CliRunner

from gapforge.agents.errors import ModelEndpointError
from gapforge.cli import app
from gapforge.config import load_config
from gapforge.run_inspect import in_flight
from gapforge.run_session import RunOptions, create_run, drive_run
from gapforge.run_view import runs_table
from gapforge.wiring import open_store
from tests.fakes.fake_stages import FakeStages
from tests.graph.conftest import write_config

runner = CliRunner()
ANSWERS = 'policy:\n  repeat: "Hello there"\n'  # the scripted policy's one answer
LONG_ID = "failed-at-discover-a-run-id-long-enough-to-be-cut-0001"


class AnalystBreaks(FakeStages):
    """discover reports a line of progress, then an error escapes it (the run: failed)."""

    async def discover(self, run_id: str):
        self.progress("discover", "read 10 episodes")
        raise ValueError("the analyst's answer names no capability")


class AnalystDown(FakeStages):
    """discover reports a line of progress, then its endpoint stays down (infrastructure: the run is incomplete)."""

    async def discover(self, run_id: str):
        self.progress("discover", "read 10 episodes")
        raise ModelEndpointError(
            "the LLM endpoint http://127.0.0.1:9/v1 kept failing (connection refused) after 4 retries"
        )


def _stopped_at_discover(
    config: Path, stages: type[FakeStages], error: type[BaseException], run_id: str | None = None
) -> str:
    """A graph run over the fake stages whose discover stops it: collect_rollouts finished (its last progress line,
    `9/10 episodes`, stays in the progress file), discover is next in the checkpoint."""
    cfg = load_config(config, [], environ={})

    @asynccontextmanager
    async def open_stages(cfg: Any, store: Any, progress: Any = None) -> AsyncIterator[FakeStages]:
        yield stages(cfg, store, progress)

    with open_store(cfg) as store:
        rid = create_run(store, "trace", "run", cfg, RunOptions(), run_id)
        with pytest.raises(error):
            drive_run(cfg, store, rid, RunOptions(), fresh=True, open_stages=open_stages)
    return rid


@pytest.fixture
def fake_config(tmp_path: Path) -> Path:
    """A workspace config selecting the fake stage services (`stages: fixtures`)."""
    return write_config(tmp_path / "config.yaml", tmp_path / "ws")


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_state_of_a_run_that_failed_at_discover_says_so_and_not_in_progress(fake_config: Path) -> None:
    rid = _stopped_at_discover(fake_config, AnalystBreaks, ValueError)
    code, out = invoke("state", rid, "--config", str(fake_config))
    assert code == 0, out
    assert "status: failed" in out and "next: discover" in out
    assert (
        "discover: failed — an error stopped it before it finished (its last progress: discover: read 10 episodes)"
        in out
    ), out
    assert "collect_rollouts: done" in out
    assert "in progress" not in out and "9/10 episodes" not in out, out
    assert "  stopped by: ValueError: the analyst's answer names no capability" in out  # kept with the run


def test_state_of_a_stopped_run_shows_progress_of_the_stage_in_flight_only(fake_config: Path) -> None:
    rid = _stopped_at_discover(fake_config, AnalystDown, ModelEndpointError)
    code, out = invoke("state", rid, "--config", str(fake_config))
    assert code == 0, out
    assert "status: incomplete" in out and "in progress: discover: read 10 episodes" in out, out
    assert "in progress: collect_rollouts" not in out and "failed" not in out, out
    assert "stopped by: ModelEndpointError: the LLM endpoint http://127.0.0.1:9/v1 kept failing" in out, out
    # the next invocation (a resume) starts without it: its first progress line rewrites the file without the error
    from gapforge.run_progress import keeping_progress, read_progress

    cfg = load_config(fake_config, [], environ={})
    assert "error" in read_progress(cfg, rid)
    keeping_progress(cfg, rid, None)("discover", "read 10 episodes again")
    assert "error" not in read_progress(cfg, rid) and read_progress(cfg, rid)["discover"] == "read 10 episodes again"


def test_in_the_capability_branches_only_the_branches_not_over_are_in_flight() -> None:
    progress = {
        "collect_rollouts": "10/10 episodes",
        "synthesize alpha": "attempt 2: validating",
        "train alpha": "step 3/12",
        "train beta": "step 12/12",
        "train_baseline": "GRPO on the target's tasks",
    }
    values = {"capabilities": {"alpha": {"status": "validated"}, "beta": {"status": "trained"}}}
    assert in_flight(progress, ("capability", "capability"), values) == {
        "synthesize alpha": "attempt 2: validating",
        "train alpha": "step 3/12",
    }
    assert in_flight(progress, ("train_baseline",), values) == {"train_baseline": "GRPO on the target's tasks"}


def _collect(config: Path) -> str:
    answers = config.parent / "answers.yaml"
    answers.write_text(ANSWERS)
    code, out = invoke(
        "rollouts",
        "collect",
        "--env",
        "shop",
        "--policy",
        f"scripted:{answers}",
        "--tasks",
        "shop-lookup-001,shop-lookup-002",
        "--set",
        "rollouts.max_turns=1",
        "--config",
        str(config),
    )
    assert code == 0, out
    return run_id_in(out)


def _row(out: str, run_id: str) -> list[str]:
    """The cells of the table row of `run_id` (its id cell whole, on one line)."""
    (line,) = [line for line in out.splitlines() if line.startswith(f"│ {run_id} ")]
    return [c.strip() for c in line.split("│")[1:-1]]


def test_runs_lists_collect_runs_with_their_kind_env_and_episodes(fake_config: Path) -> None:
    graph_id = _stopped_at_discover(fake_config, AnalystBreaks, ValueError, LONG_ID)
    collect_id = _collect(fake_config)
    code, out = invoke("runs", "--config", str(fake_config))
    assert code == 0, out
    assert "…" not in out
    kind, _started, status, env, episodes, stage, retained, trained, rates = _row(out, collect_id)[1:]
    assert (kind, status, env, episodes, stage, retained, trained, rates) == (
        "rollouts",
        "done",
        "shop",
        "2 (0.0%)",
        "",
        "",
        "",
        "",
    )
    kind, _started, status, env, episodes, stage, *_ = _row(out, LONG_ID)[1:]
    assert (kind, status, env, episodes, stage) == ("trace", "failed", "shop", "10 (50.0%)", "collect_rollouts")
    assert f"{graph_id} is failed: continue with `gapforge run --resume {graph_id}`" in out

    code, out = invoke("runs", "--kind", "rollouts", "--config", str(fake_config))
    assert code == 0 and collect_id in out and LONG_ID not in out, out
    code, out = invoke("runs", "--kind", "graph", "--config", str(fake_config))
    assert code == 2 and "unknown --kind graph: pass one of trace, demo, rollouts" in out, out


def test_a_narrow_terminal_wraps_the_other_columns_and_keeps_every_id_whole(fake_config: Path) -> None:
    _stopped_at_discover(fake_config, AnalystBreaks, ValueError, LONG_ID)
    with open_store(load_config(fake_config, [], environ={})) as store:
        rows = [(store.get_run(LONG_ID), {"stage": "collect_rollouts", "rollouts": {"episodes": 10, "successes": 5}})]
    console = Console(width=100, record=True, force_terminal=True)
    console.print(runs_table(rows))
    text = console.export_text()
    assert f"│ {LONG_ID} │" in text and "…" not in text, text


def test_resume_where_there_is_no_store_is_refused_and_creates_nothing(fake_config: Path, tmp_path: Path) -> None:
    code, out = invoke("run", "--resume", "r-nope", "--config", str(fake_config))
    assert code == 2, out
    assert "no store at" in out and "GAPFORGE_WORKSPACE / store.url" in out and "Traceback" not in out, out
    assert not (tmp_path / "ws").exists()  # no workspace, no empty database left behind


def test_reading_commands_where_there_is_no_store_say_where_they_looked_and_create_nothing(
    fake_config: Path, tmp_path: Path
) -> None:
    code, out = invoke("runs", "--config", str(fake_config))
    assert code == 0 and out.startswith("no runs: no store at") and str(tmp_path / "ws" / "gapforge.db") in out, out
    for command in (
        ["state", "r-nope"],
        ["history", "r-nope"],
        ["report", "r-nope"],
        ["evaluate", "r-nope"],
        ["rollouts", "show", "r-nope"],
        ["fork", "r-nope", "--checkpoint", "c"],
    ):
        code, out = invoke(*command, "--config", str(fake_config))
        assert code == 2 and "no store at" in out and "Traceback" not in out, (command, out)
    assert not (tmp_path / "ws").exists()  # a mistyped workspace or another directory: no empty store left there


def test_resume_of_an_unknown_run_in_an_existing_store_names_the_run(fake_config: Path) -> None:
    _stopped_at_discover(fake_config, AnalystBreaks, ValueError)
    code, out = invoke("run", "--resume", "r-nope", "--config", str(fake_config))
    assert code == 2 and "unknown run 'r-nope'" in out, out


def test_state_of_a_collection_run_points_at_its_episodes_and_the_runs_it_takes(fake_config: Path) -> None:
    with open_store(load_config(str(fake_config), [])) as store:
        rid = store.create_run("rollouts", {})
    for command in ("state", "history"):
        code, out = invoke(command, rid, "--config", str(fake_config))
        assert (
            code == 2
            and f"is a 'rollouts' run, not a graph run: read its episodes with `gapforge rollouts show {rid}`" in out
        )
        assert "--kind trace --kind demo" in out, out
