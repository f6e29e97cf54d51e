"""`gapforge analyze` through the CLI: table, plot, cost line with 0 calls on re-run, --show, one-line errors, why labeling failed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gapforge.agents.analysis.recorded import load_recording
from gapforge.cli import app
from gapforge.store import Store

RUN = "r-analysis"


def test_analyze_prints_table_plot_cost_and_reuses_everything(planted_db: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(planted_db, ws / "gapforge.db")
    runner = CliRunner()
    args = ["analyze", RUN, "--set", f"workspace={ws}", "--set", "analysis.bootstrap=100", "--passes", "2"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "retained: precondition_verification" in first.output
    assert (ws / "reports" / RUN / "analysis.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "0 cached" in first.output
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "cost: 0 calls made" in second.output
    shown = runner.invoke(app, ["analyze", RUN, "--set", f"workspace={ws}", "--show", "precondition_verification"])
    assert shown.exit_code == 0 and "LACKING episodes" in shown.output
    count = re.search(r"(\d+) episode\(s\)", shown.output)
    assert count and int(count.group(1)) > 0 and "[" in shown.output  # evidence cites a message index
    unknown = runner.invoke(app, ["analyze", RUN, "--set", f"workspace={ws}", "--show", "nope"])
    assert unknown.exit_code == 2 and "no capability 'nope'" in unknown.output


def test_analyze_unknown_run_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", "missing-run", "--set", f"workspace={tmp_path}"])
    assert result.exit_code == 2 and "no store at" in result.output and "Traceback" not in result.output
    Store(f"sqlite:///{tmp_path / 'gapforge.db'}").close()  # a store without that run
    result = CliRunner().invoke(app, ["analyze", "missing-run", "--set", f"workspace={tmp_path}"])
    assert result.exit_code == 2
    assert "unknown run 'missing-run'" in result.output and "Traceback" not in result.output


def test_analyze_prints_why_labeling_failed(planted_db: Path, tmp_path: Path) -> None:
    """A labeling model that answers two episodes with malformed structures (broken JSON; an unknown capability):
    the failures line is followed by each distinct error, with the episode and pass that met it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(planted_db, ws / "gapforge.db")
    runner = CliRunner()
    base = ["analyze", RUN, "--set", f"workspace={ws}", "--set", "analysis.bootstrap=20"]
    first = runner.invoke(app, [*base, "--passes", "1"])  # the recorded analyst: discovery and pass 0
    assert first.exit_code == 0 and "labeling failures" not in first.output, first.output
    names = [c["name"] for c in load_recording("shop")]
    ok = {
        "structured": {
            "labels": [
                {"capability": n, "label": "NA", "evidence": "not exercised", "message_index": None} for n in names
            ]
        }
    }
    unknown = {
        "structured": {"labels": [{"capability": "nope", "label": "NA", "evidence": "-", "message_index": None}]}
    }
    answers = tmp_path / "analyst.yaml"  # pass 1 from this file, one call at a time: episode order is call order
    answers.write_text(
        yaml.safe_dump({"analyst_label": [{"structured": "{not json"}] * 2 + [unknown] * 2 + [ok] * 200})
    )
    second = runner.invoke(
        app, [*base, "--passes", "2", "--set", f"llm.scripted_path={answers}", "--set", "analysis.concurrency=1"]
    )
    assert second.exit_code == 0, second.output
    assert "labeling failures: 2 (episode x pass)" in second.output
    lines = [line.strip() for line in second.output.splitlines() if line.strip().startswith("episode ")]
    assert len(lines) == 2 and all(
        ", pass 1: the model returned malformed EpisodeLabels output twice" in line for line in lines
    )
    assert "not valid JSON" in lines[0] or "Expecting" in lines[0], lines[0]
    assert "unknown capabilities: nope" in lines[1]
