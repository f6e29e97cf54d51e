"""`gapforge analyze` through the CLI: table, plot, cost line with 0 calls on re-run, --show, one-line errors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from gapforge.cli import app

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
    assert result.exit_code == 2
    assert "unknown run 'missing-run'" in result.output and "Traceback" not in result.output
