"""What `gapforge runs` and `gapforge state` (gapforge/cli_run.py) read besides the graph's tables: the runs listed and
each one's values (a graph run's checkpointed state; a `rollouts collect` run, which has no checkpoint, its stored
episodes counted), the command that continues a run of either kind, the lines of a stage in flight or of the stage that
failed; and `print_whole`, which prints a table with nothing cut when the output is not a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from gapforge.errors import UsageError
from gapforge.rollouts_run import resume_command
from gapforge.run_progress import ERROR
from gapforge.run_view import GRAPH_KINDS

if TYPE_CHECKING:
    from gapforge.store import Store

LISTED_KINDS = (*GRAPH_KINDS, "rollouts")  # what `gapforge runs` lists
BRANCH_STAGES = ("synthesize", "validate", "train")  # inside the graph's `capability` node, one branch per capability
BRANCH_OVER = ("unsynthesized", "trained", "failed", "unavailable", "dropped", "rejected")  # the branch ended


def listed_kinds(asked: list[str] | None) -> tuple[str, ...]:
    """The kinds `--kind` asks for (every listed kind when none); an unknown one is a UsageError."""
    unknown = [k for k in asked or () if k not in LISTED_KINDS]
    if unknown:
        raise UsageError(f"unknown --kind {', '.join(unknown)}: pass one of {', '.join(LISTED_KINDS)}")
    return tuple(asked or LISTED_KINDS)


async def run_rows(store: Store, graph: Any, kinds: tuple[str, ...]) -> list[tuple[Any, dict[str, Any]]]:
    """(run, values) for every run of these kinds, newest first: a graph run's checkpointed state; for a rollouts run,
    which has no checkpoint to ask the graph for, `{"rollouts": {"episodes", "successes"}}` from its stored episodes."""
    from gapforge.graph.runner import thread_config

    rows = []
    for run in store.list_runs():
        if run.kind not in kinds:
            continue
        if run.kind in GRAPH_KINDS:
            rows.append((run, dict((await graph.aget_state(thread_config(run.id))).values or {})))
        else:
            episodes = store.episode_summaries(run.id)
            rows.append((run, {"rollouts": {"episodes": len(episodes), "successes": sum(e.success for e in episodes)}}))
    return rows


def continue_command(run: Any, config: str | None) -> str:
    """The command that continues an interrupted, incomplete or failed run of either kind."""
    return f"gapforge run --resume {run.id}" if run.kind in GRAPH_KINDS else resume_command(run.id, config)


def in_flight(progress: dict[str, str], next_nodes: tuple[str, ...], values: dict[str, Any]) -> dict[str, str]:
    """The progress lines (gapforge/run_progress.py: where -> last line) of the stages in flight: those of the nodes the
    checkpoint runs next and, for `capability`, of the branches not over yet. A finished stage's last line (e.g.
    `collect_rollouts: 26/26 episodes` once discover is next) is left out."""
    caps = values.get("capabilities") or {}
    out = {}
    for where, line in progress.items():
        stage, _, capability = where.partition(" ")
        over = (caps.get(capability) or {}).get("status") in BRANCH_OVER
        branch = "capability" in next_nodes and stage in BRANCH_STAGES and not over
        if stage in next_nodes or branch:
            out[where] = line
    return out


def stage_lines(
    status: str, next_nodes: tuple[str, ...], values: dict[str, Any], progress: dict[str, str]
) -> list[str]:
    """`gapforge state`'s lines after the stage statuses. A failed run (an error escaped a stage, which its checkpoint
    still runs next): `  STAGE: failed — ...` with the stage's last progress line when it reported one. Otherwise
    `  in progress: WHERE: LINE` for each part of the stage(s) in flight. A run an error stopped (failed, incomplete)
    also gets `  stopped by: ERROR` (gapforge/run_progress.py: kept until the run resumes)."""
    stopped = [f"  stopped by: {progress[ERROR]}"] if status in ("failed", "incomplete") and progress.get(ERROR) else []
    if status != "failed":
        in_progress = in_flight(progress, next_nodes, values).items()
        return [*(f"  in progress: {where}: {line}" for where, line in in_progress), *stopped]
    lines = []
    for node in dict.fromkeys(next_nodes):
        last = "; ".join(f"{where}: {line}" for where, line in in_flight(progress, (node,), values).items())
        why = f"its last progress: {last}" if last else "the command that ran it printed the error"
        lines.append(f"  {node}: failed — an error stopped it before it finished ({why})")
    return [*lines, *stopped]


def print_whole(console: Console, table: Table) -> None:
    """Print `table` on a terminal at the terminal's width; piped or redirected, at the table's own full width (at
    least 160 columns), so a file or the next program gets every value whole, one line per row."""
    if console.is_terminal:
        console.print(table)
        return
    full = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    Console(file=console.file, width=max(full, 160)).print(table)
