"""`gapforge toolsandbox metrics RUN`: the TRACE paper's ToolSandbox metrics for a run's stored episodes
(`envs.toolsandbox.metrics.stored_metrics`), per toolsandbox env of the run and per category: scenarios run, perfect
(similarity == 1.0), mean similarity, excluded (network tools with network="off", known from ToolSandbox's catalogue
when its venv is installed). A stand-in network env's table is followed by a line saying its scores are not comparable
to live RapidAPI runs (`comparable_to_live: false` and `note` in --json)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated

import typer
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors
from gapforge.errors import UsageError
from gapforge.wiring import open_store

app = typer.Typer(no_args_is_help=True, help="ToolSandbox target: the paper's metrics over stored episodes.")


def _catalogue_views(env: str) -> tuple[Mapping[str, list[str]], Mapping[str, list[str]]] | None:
    """(excluded scenario -> network tools, scenario -> categories) of `env`, or None without ToolSandbox's venv."""
    from gapforge.envs.toolsandbox.runtime import missing_reason

    if missing_reason() is not None:
        return None
    from gapforge.envs.registry import make_env
    from gapforge.envs.toolsandbox import catalog

    target = make_env(env)  # builds no worker: the catalogue is cached beside the venv
    try:
        excluded = target.excluded()  # type: ignore[attr-defined]
    finally:
        target.close()
    return excluded, {s["name"]: s["categories"] for s in catalog()["scenarios"]}


@app.command("metrics")
@handle_errors
def metrics_cmd(
    run: Annotated[str, typer.Argument(help="run id holding toolsandbox episodes")],
    env: Annotated[
        str | None, typer.Option("--env", help="only this env, e.g. toolsandbox:state_dependency?network=stand-in")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Perfect count and mean similarity per category, with run / excluded counts (as the paper reports)."""
    from gapforge.envs.toolsandbox.metrics import is_toolsandbox, stored_metrics

    with open_store(get_config(config, set_), must_exist=True) as store:
        store.get_run(run)
        episodes = [e for e in store.episodes(run, env=env) if is_toolsandbox(e.env)]
    if not episodes:
        raise UsageError(
            f"run {run!r} has no stored toolsandbox episode{f' of env {env!r}' if env else ''}: "
            "collect some with `gapforge rollouts collect --env toolsandbox`"
        )
    views = {e.env: _catalogue_views(e.env) for e in episodes}
    results = stored_metrics(
        episodes,
        excluded_for=lambda name: (views[name] or ({}, {}))[0],
        categories_of=lambda name: (views[name] or ({}, {}))[1],
    )
    if as_json:
        typer.echo(json.dumps([r.model_dump() for r in results], indent=2))
        return
    for r in results:
        note = "" if views[r.env] is not None else " (excluded counts unknown: ToolSandbox's venv is not installed)"
        table = Table(title=f"run {run} · {r.env} · network {r.network} · {r.episodes} episodes{note}")
        for col in ("category", "run", "perfect", "mean similarity", "excluded"):
            table.add_column(col, justify="left" if col == "category" else "right")
        for cat, m in r.categories.items():
            table.add_row(cat, str(m.run), str(m.perfect), f"{m.mean_similarity:.3f}", str(m.excluded))
        console.print(table)
        if r.note:
            console.print(f"{r.env}: {r.note}", highlight=False)
        if r.uncategorised:
            console.print(
                f"{len(r.uncategorised)} scenario(s) without categories (counted in 'all' only): {', '.join(r.uncategorised[:5])}",
                highlight=False,
            )
