"""Printing a graph run as it drives: the live progress view, then how it ended (tables, headline, report), the exit
code. Shared by `gapforge run / fork` (cli_run.py) and `gapforge demo` (demo.py); the lifecycle itself is
gapforge/run_session.py."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console

from gapforge.cli_common import console, fail, fail_error
from gapforge.errors import GapforgeError
from gapforge.run_session import RunOptions, drive_run
from gapforge.run_view import ProgressView, capability_table, evaluation_table, stage_times
from gapforge.wiring import open_store

if TYPE_CHECKING:
    from gapforge.store import Store

store_of = open_store  # the name gapforge/cli_run.py opens its store by


def print_table(table: Any) -> None:
    """Tables are wide: render at least 160 columns even when piped (rich defaults to 80)."""
    Console(width=max(console.width, 160) if not console.is_terminal else None).print(table)


def say(line: str) -> None:
    console.print(line, highlight=False, soft_wrap=True)


def drive(cfg: Any, store: Store, run_id: str, options: RunOptions, *, fresh: bool, last_line: bool = True) -> int:
    """Run or resume `run_id` (gapforge/run_session.py) with a live progress view; print how it ended; the exit code."""
    resume = f"gapforge run --resume {run_id}"
    started = time.perf_counter()
    try:
        with ProgressView(console) as view:
            outcome = drive_run(
                cfg,
                store,
                run_id,
                options,
                fresh=fresh,
                on_event=view.event,
                log=lambda where, text: view.log(f"    {where}: {text}", "dim"),
            )
    except KeyboardInterrupt:
        fail(f"interrupted; continue with `{resume}`", code=130)
    except GapforgeError as e:  # exit 3: an infrastructure stop (work kept, nothing blamed), else 2: fix, then resume
        fail_error(e, resume=resume)
    if outcome.status == "paused":
        say(
            f"paused before {', '.join(outcome.waiting_for)}: inspect with `gapforge review {run_id}`, decide with "
            f"`gapforge review {run_id} --approve` (or --keep a,b), then `gapforge run --resume {run_id}`"
        )
    else:
        values = outcome.values
        print_table(capability_table(values))
        if values.get("evaluation"):
            print_table(evaluation_table(values))
            from gapforge.evaluation.summary import UNSEEN, headline, scope_metrics

            metrics = scope_metrics(store, run_id)
            for line in headline(metrics) if metrics else []:  # the focus family's base -> TRACE, paired 95% interval
                say(line)
            unseen = scope_metrics(store, run_id, UNSEEN)
            if unseen.get("base"):  # the second held-out split (evaluation.unseen_env), the same lines
                m = unseen["base"]
                say(
                    f"unseen records ({m.get('env')}: {m.get('tasks')} tasks no analysis, synthetic env or baseline saw):"
                )
                for line in headline(unseen):
                    say(f"  {line}")
        if values.get("report"):
            say(f"report: {values['report']}")
        if times := stage_times(values, time.perf_counter() - started):
            say(times)
    if last_line:
        say(f"run {run_id}")
    return 0
