"""`report`: report.md and its plots for the run (evaluation.report)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from gapforge.graph.context import ReportDone

if TYPE_CHECKING:
    from gapforge.stages import RunStages


async def report(sc: RunStages, run_id: str, *, out: str | None = None) -> ReportDone:
    """Into `out`, or the run's report directory in the workspace."""
    from gapforge.evaluation.report import write_report

    where = Path(out) if out else sc.deps.workspace.report_dir(run_id)
    result = await asyncio.to_thread(write_report, sc.store, run_id, where)
    return ReportDone(str(result.path), missing=list(result.missing))
