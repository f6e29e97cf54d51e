"""`report`: report.md and its plots for the run (evaluation.report)."""

from __future__ import annotations

import asyncio

from gapforge.stages.common import StageContext, require
from graph.context import ReportDone


async def report(sc: StageContext, run_id: str) -> ReportDone:
    require("evaluation.report", "the report")
    from evaluation.report import write_report

    result = await asyncio.to_thread(write_report, sc.store, run_id, sc.deps.workspace.report_dir(run_id))
    return ReportDone(str(result.path))
