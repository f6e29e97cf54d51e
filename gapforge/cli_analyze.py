"""`gapforge analyze RUN`: contrastive capability analysis of a run's episodes, with the run's stored config
(gapforge/run_config.py): the analysis stage the graph's discover / label / select nodes call
(`gapforge.stages.analysis`: its steps in turn), rendered; never computes anything itself.

    gapforge analyze RUN [--passes R] [--set analysis.delta=0.3] [--plot FILE] [--retry-failed]
    gapforge analyze RUN --show CAPABILITY
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, console, fail, handle_errors, run_config

if TYPE_CHECKING:
    from gapforge.store import Store


def _fmt(x: float | None, ci: tuple[float | None, float | None] | None = None) -> str:
    if x is None:
        return "undefined"
    text = f"{x:+.2f}" if ci is not None and ci != (None, None) and x < 0 else f"{x:.2f}"
    if ci is not None and ci[0] is not None and ci[1] is not None:
        text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return text


def plot_gap_coverage(rows: list[Any], delta: float, rho: float, path: Path) -> Path:
    """PNG: gap vs coverage per capability with bootstrap intervals and the δ / ρ thresholds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    placed: dict[tuple[float, float], int] = {}  # capabilities at the same point get stacked labels
    for r in rows:
        if r.gap is None or r.coverage is None:
            continue
        xerr = [[r.coverage - r.coverage_low], [r.coverage_high - r.coverage]] if r.coverage_low is not None else None
        yerr = [[r.gap - r.gap_low], [r.gap_high - r.gap]] if r.gap_low is not None else None
        color = "tab:green" if r.retained else "tab:gray"
        ax.errorbar(r.coverage, r.gap, xerr=xerr, yerr=yerr, fmt="o", color=color, capsize=3)
        spot = (round(r.coverage, 3), round(r.gap, 3))
        placed[spot] = placed.get(spot, -1) + 1
        ax.annotate(
            f"{r.capability} ({r.kept_passes}/{r.passes})",
            (r.coverage, r.gap),
            textcoords="offset points",
            xytext=(6, 6 + 11 * placed[spot]),
            fontsize=8,
        )
    ax.axhline(delta, color="tab:red", linestyle="--", linewidth=1, label=f"δ = {delta:.2f}")
    ax.axvline(rho, color="tab:blue", linestyle="--", linewidth=1, label=f"ρ = {rho:.2f}")
    ax.set_xlabel("coverage (LACKING failures / failures)")
    ax.set_ylabel("gap Δ = ER- − ER+")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_title("capabilities: gap vs coverage (green = retained; bars = 95% bootstrap CI)")
    ax.legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
    return path


def failure_lines(calls: list[Any], limit: int = 3, width: int = 300) -> list[str]:
    """Why labeling failed: the first `limit` distinct errors of failed label calls (stored in `label_calls.error`), one
    line each with the first episode and pass that met it and how many more did."""
    first: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for c in calls:
        text = " ".join((c.error or "no error recorded").split())
        text = text if len(text) <= width else text[: width - 3] + "..."
        first.setdefault(text, c)
        seen[text] = seen.get(text, 0) + 1
    lines = []
    for text, c in list(first.items())[:limit]:
        more = f" (and {seen[text] - 1} more with this error)" if seen[text] > 1 else ""
        lines.append(f"episode {c.episode_id}, pass {c.pass_index}: {text}{more}")
    if len(first) > limit:
        lines.append(f"... {len(first) - limit} more distinct error(s)")
    return lines


def _show(store: Store, run: str, capability: str) -> None:
    """The episodes labeled LACKING for `capability` in any pass, with the first such pass's evidence."""
    from gapforge.agents.errors import AnalysisError

    if store.get_capability(run, capability) is None:
        known = ", ".join(c.name for c in store.capabilities(run)) or "none yet"
        raise AnalysisError(f"run {run!r} has no capability {capability!r}: pick one of {known}")
    by_episode: dict[int, list[Any]] = {}
    for lab in store.labels(run, capability=capability):
        if lab.value == "LACKING":
            by_episode.setdefault(lab.episode_id, []).append(lab)
    table = Table(title=f"{capability}: LACKING episodes of run {run}")
    for col in ("episode", "task", "outcome", "passes", "evidence"):
        table.add_column(col)
    for eid in sorted(by_episode):
        ep = store.get_episode(eid)
        labs = sorted(by_episode[eid], key=lambda lab: lab.pass_index)
        table.add_row(
            str(eid),
            ep.task_id,
            "success" if ep.success else "failure",
            ",".join(str(lab.pass_index) for lab in labs),
            labs[0].evidence,
        )
    console.print(table)
    console.print(f"{len(by_episode)} episode(s); see one with `gapforge rollouts show {run} --episode ID`")


def _table(sel: Any) -> Table:
    table = Table(
        title=f"capabilities of run {sel.run_id} ({sel.episodes} analysis episodes, R={sel.passes}, K={sel.required_passes})"
    )
    for col in ("capability", "ER+", "ER-", "Δ [95% CI]", "coverage [95% CI]", "kept k/R", "κ", "verdict"):
        table.add_column(col)
    for s in sel.statistics:
        table.add_row(
            s.capability,
            _fmt(s.er_plus),
            _fmt(s.er_minus),
            _fmt(s.gap, s.gap_ci or (None, None)),
            _fmt(s.coverage, s.coverage_ci or (None, None)),
            f"{s.kept_passes}/{sel.passes}",
            "-" if s.kappa is None else f"{s.kappa:.2f}",
            ("[green]" if s.retained else "") + s.verdict,
        )
    return table


@handle_errors
def analyze(
    run: str = typer.Argument(..., help="run id (see `gapforge rollouts show`)"),
    passes: int | None = typer.Option(None, "--passes", min=1, help="labeling passes R (default: analysis.passes)"),
    show: str | None = typer.Option(None, "--show", help="list a capability's LACKING episodes with evidence"),
    plot: Path | None = typer.Option(None, "--plot", help="PNG path (default: WORKSPACE/reports/RUN/analysis.png)"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="re-ask episodes whose labeling failed before"),
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Discover the capabilities a run's agent lacks, label every episode R times, keep the stable gaps."""
    from gapforge.agents.errors import AnalysisError
    from gapforge.run_lease import run_lease
    from gapforge.stages import analysis, open_stages

    cfg, store = run_config(
        run, config, [*(set_ or []), *([f"analysis.passes={passes}"] if passes is not None else [])]
    )
    try:
        with store:
            if show:
                _show(store, run, show)
                return
            with run_lease(cfg, run, "analyze"):
                envs = sorted({e.env for e in store.episodes(run)})
                if not envs:
                    fail(f"run {run!r} has no episodes: collect rollouts first (gapforge rollouts collect --run {run})")
                with Progress(
                    TextColumn("labeling"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                    transient=True,
                ) as bar:
                    task = bar.add_task("labeling", total=None)

                    async def go() -> tuple[Any, Any, list[Any], Any, Any]:  # the graph's analysis steps, in turn
                        async with open_stages(cfg, store) as stages:
                            stages.analysis_env = envs[0]
                            split, found = await analysis.run_discovery(stages, run)
                            labeled: list[Any] = []
                            for p in range(cfg.analysis.passes):  # on_progress counts episodes over all R passes
                                before = sum(r.episodes for r in labeled)
                                labeled.append(
                                    await analysis.run_label_pass(
                                        stages,
                                        run,
                                        p,
                                        retry_failed=retry_failed,
                                        on_progress=lambda done, total, before=before: bar.update(
                                            task, completed=before + done, total=total * cfg.analysis.passes
                                        ),
                                    )
                                )
                            selection = await analysis.run_selection(stages, run)
                            return split, found, labeled, selection, stages.analyst[1]  # type: ignore[index]

                    split, found, labeled, selection, counter = asyncio.run(go())
            rows = store.capability_summaries(run)
    except AnalysisError as e:
        fail(str(e))
    console.print(_table(selection))
    kept = ", ".join(selection.retained) or "none"
    console.print(f"retained: {kept}")
    failures = sum(selection.labeling_failures.values())
    from gapforge.wiring import open_store

    with open_store(cfg) as store:
        current = {(p.pass_index, p.dictionary_hash) for p in labeled}
        failed = [c for c in store.label_calls(run, status="failed") if (c.pass_index, c.dictionary_hash) in current]
    at_endpoint = sum(1 for c in failed if c.boundary == "endpoint")
    if failures and failures > at_endpoint:
        console.print(
            f"[yellow]labeling failures: {failures - at_endpoint} (episode x pass) of the model's output, left out of the rates; "
            "re-ask with --retry-failed"
        )
        for line in failure_lines([c for c in failed if c.boundary != "endpoint"]):
            console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    path = plot or cfg.workspace / "reports" / run / "analysis.png"
    console.print(f"plot: {plot_gap_coverage(rows, cfg.analysis.delta, cfg.analysis.rho, path)}")
    fresh = not found.cached  # a stored discovery made no call and spent no token
    console.print(
        f"cost: {found.calls + sum(p.calls for p in labeled)} calls made, "
        f"{int(found.cached) + sum(p.cached for p in labeled)} cached; "
        f"{fresh * found.prompt_tokens + sum(p.prompt_tokens for p in labeled)} prompt + "
        f"{fresh * found.completion_tokens + sum(p.completion_tokens for p in labeled)} completion tokens "
        f"(tokens: {counter.name}); split: {len(split.analysis)} analysis / {len(split.heldout)} held-out tasks",
        highlight=False,
    )
    if at_endpoint:
        from gapforge.agents.errors import IncompleteStage

        raise IncompleteStage(
            f"{at_endpoint} labeling call(s) failed at the endpoint (not the model's fault) and were left out: "
            f"re-run `gapforge analyze {run}` to redo them"
        )
