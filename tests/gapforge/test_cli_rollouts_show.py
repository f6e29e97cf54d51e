"""`gapforge rollouts show RUN` piped (CliRunner's output is not a terminal): every value whole, however long the env
and task names."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.store import Store

ENV = "python:examples/customer_support/a_rather_long_module_name.py:CustomerSupportEnvironment"
TASKS = {
    "refund-a-damaged-item-bought-with-a-gift-card-0001": (0.75, True),
    "cancel-an-order-that-already-shipped-abroad-0002": (0.125, False),
}


def _store(ws: Path) -> str:
    ws.mkdir()
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        run_id = store.create_run("rollouts", {"command": "rollouts collect", "env": ENV, "policy": "scripted"})
        for task, (reward, success) in TASKS.items():
            store.put_episode(
                run_id,
                ENV,
                task,
                0,
                policy="scripted",
                messages=[],
                reward=reward,
                success=success,
                components={},
                termination="agent_done",
                error=None,
                turns=3,
                timings={},
                task_family="long-family-name-of-support-tasks",
            )
    return run_id


def test_a_piped_show_prints_every_value_whole(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    run_id = _store(ws)
    result = CliRunner().invoke(app, ["rollouts", "show", run_id, "--set", f"workspace={ws}"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "…" not in out, out
    for task, (reward, success) in TASKS.items():
        (line,) = [line for line in out.splitlines() if task in line]  # one line per episode: nothing wrapped
        cells = [c.strip() for c in line.split("│")[1:-1]]
        assert cells[1:4] == [ENV, task, "0"] and cells[5:8] == [f"{reward:.2f}", "yes" if success else "no", "3"], (
            cells
        )
    assert "│ long-family-name-of-support-tasks │        2 │     50.0% │       0.438 │        3.0 │" in out, out
