"""`gapforge review RUN [--approve | --keep a,b]`: the capability list a `--review` run paused on, and the decision."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gapforge.cli_common import ConfigOpt, SetOpt, UsageError, handle_errors
from gapforge.cli_drive import print_table, say
from gapforge.cli_run import inspect_graph_of, snapshot_of
from gapforge.run_view import capability_table

if TYPE_CHECKING:
    from gapforge.store import Store


def register(root: typer.Typer) -> None:
    root.command("review")(review_cmd)


@handle_errors
def review_cmd(
    run: str,
    approve: Annotated[bool, typer.Option("--approve", help="keep the retained list as it is")] = False,
    keep: Annotated[
        str | None, typer.Option("--keep", help="comma-separated capabilities to train (edits the list)")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Show the capability list a --review run paused on, or record the decision (then `run --resume`)."""
    from gapforge.graph.runner import thread_config

    if approve and keep:
        raise UsageError("give --approve or --keep, not both")

    async def go(store: Store, graph: Any) -> Any:
        snap = await snapshot_of(store, graph, run)
        if tuple(snap.next) != ("review",) or not snap.interrupts:
            raise UsageError(f"run {run!r} is not waiting for a review (next: {', '.join(snap.next) or 'end'})")
        values = dict(snap.values)
        retained = list(values.get("retained") or [])
        if not (approve or keep):
            return values, None
        chosen = retained if approve else [c.strip() for c in (keep or "").split(",") if c.strip()]
        known = set(values.get("dictionary") or []) | set(values.get("capabilities") or {})
        unknown = [c for c in chosen if c not in known]
        if unknown:
            raise UsageError(f"unknown capability {', '.join(unknown)}: pick from {', '.join(sorted(known))}")
        decision = {"retained": chosen, "edited": not approve}
        await graph.aupdate_state(thread_config(run), {"review": decision}, as_node="select")
        return values, decision

    values, decision = inspect_graph_of(config, set_, go)[2]
    if decision is None:
        print_table(capability_table(values))
        say(f"retained: {', '.join(values.get('retained') or []) or 'none'}")
        say(f"decide: gapforge review {run} --approve | --keep a,b")
        return
    say(
        f"review recorded for {run}: train {', '.join(decision['retained']) or 'nothing'}; continue with `gapforge run --resume {run}`"
    )
