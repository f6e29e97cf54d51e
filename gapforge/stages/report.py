"""`report`: report.md and its plots for the run (evaluation.report)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.graph.context import ReportDone

if TYPE_CHECKING:
    from gapforge.stages import RunStages


async def report(
    sc: RunStages, run_id: str, values: dict[str, Any] | None = None, *, out: str | None = None
) -> ReportDone:
    """Into `out`, or the run's report directory in the workspace; `values`: the run's graph state, whose cost counters
    the report prices at `pricing` (gapforge.pricing)."""
    from gapforge.evaluation.report import write_report
    from gapforge.pricing import Models, cost_section

    where = Path(out) if out else sc.deps.workspace.report_dir(run_id)
    cost = cost_section(values or {}, sc.cfg.pricing, Models.of(sc.cfg))
    result = await asyncio.to_thread(write_report, sc.store, run_id, where, cost)
    return ReportDone(str(result.path), missing=list(result.missing))
