"""Rich renderings of graph state for `gapforge run / runs / state / history` (no logic)."""

from __future__ import annotations

from itertools import zip_longest
from typing import Any

from rich.table import Table

from gapforge.graph.runner import Event


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _rate(metrics: dict[str, Any] | None) -> str:
    return "-" if not metrics or metrics.get("pass_rate") is None else f"{100 * metrics['pass_rate']:.1f}%"


def progress_line(ev: Event) -> str:
    """One line per finished node: what it made, in a few words."""
    u = ev.update
    head = f"{ev.node}" + (f" ({ev.capability})" if ev.capability else "")
    bits: list[str] = []
    for stage, status in (u.get("stages") or {}).items():
        bits.append(f"{status}")
        if stage in (u.get("notes") or {}):
            bits.append(u["notes"][stage])
    if "rollouts" in u:
        r = u["rollouts"]
        bits.append(f"{r['episodes']} episodes, {r['successes']} successes ({r.get('ran', 0)} new)")
    if "dictionary" in u:
        bits.append(f"{len(u['dictionary'])} candidates: {', '.join(u['dictionary'])}")
    if "retained" in u and ev.node in ("select", "review"):
        bits.append(f"retained: {', '.join(u['retained']) or 'none'}")
    if ev.capability:
        row = (u.get("capabilities") or {}).get(ev.capability) or {}
        shown = ("status", "attempts", "verdict", "adapter", "heldout_after", "error")
        bits += [f"{k}={_num(v)}" for k, v in row.items() if k in shown]
    if "baseline" in u:
        bits.append(f"{u['baseline']['adapter']} ({u['baseline']['steps']} steps)")
    if "evaluation" in u:
        bits.append(", ".join(f"{name} {_rate(m)}" for name, m in u["evaluation"].items()))
    if u.get("report"):
        bits.append(str(u["report"]))
    return f"  {head}: " + "; ".join(b for b in bits if b)


def _table(title: str, columns: str, **column: Any) -> Table:
    """A table titled on the left with the `|`-separated columns (each with `column`'s options)."""
    table = Table(title=title, title_justify="left")
    for col in columns.split("|"):
        table.add_column(col, **column)
    return table


def capability_table(values: dict[str, Any]) -> Table:
    table = _table(
        "capabilities", "capability|status|gap|coverage|kept|attempts|env verdict|adapter|held-out before→after|error"
    )
    for name, row in (values.get("capabilities") or {}).items():
        step = row.get(
            "kept_step"
        )  # the checkpoint kept; step 0: training did not beat the untrained (identity) adapter
        kept = "" if step is None else " (step 0: untrained)" if step == 0 else f" (step {step})"
        held = f"{_num(row.get('heldout_before'))} → {_num(row.get('heldout_after'))}{kept}"
        nums = [_num(row.get(k)) for k in ("gap", "coverage", "kept_passes", "attempts")]
        cells = [row.get("verdict", "-"), row.get("adapter") or "-", held, row.get("error", "")]
        table.add_row(name, row.get("status", "-"), *nums, *cells)
    return table


def evaluation_table(values: dict[str, Any]) -> Table:
    rows = values.get("evaluation") or {}
    unseen = "; unseen:* rows: the unseen records" if any(n.startswith("unseen:") for n in rows) else ""
    table = _table(f"evaluation (held-out tasks{unseen})", "policy|pass rate|mean reward|episodes|95% CI")
    for name, m in rows.items():
        ci = f"[{_num(m.get('ci_low'))}, {_num(m.get('ci_high'))}]" if m.get("ci_low") is not None else "-"
        table.add_row(name, _rate(m), _num(m.get("mean_reward")), _num(m.get("n")), ci)
    return table


COST_COLUMNS = ("llm_calls", "prompt_tokens", "completion_tokens", "policy_rollouts", "cpu_s", "gpu_s", "wall_s")


def _counters(counters: dict[str, Any], cols: tuple[str, ...] = COST_COLUMNS) -> list[str]:
    return [_num(counters.get(c), 1) if counters.get(c) else "-" for c in cols]


def cost_tables(values: dict[str, Any], cfg: Any) -> tuple[Table, Table | None, list[str]]:
    """The run's dollars at `cfg.pricing` (gapforge.pricing): each stage's counters and dollars; each capability's own
    stages (synthesize, validate, train) and its share of the shared ones (None for a run whose state has no
    per-capability counters); the spend lines and what the prices rest on."""
    from gapforge.pricing import Models, cost_view

    view = cost_view(values, cfg.pricing, Models.of(cfg))
    stages = _table("cost per stage", "|".join(("stage", *COST_COLUMNS, "$")).replace("_", " "))
    for stage, counters, dollars in view.stages:
        stages.add_row(stage, *_counters(counters), dollars.text())
    if not view.capabilities:
        return stages, None, view.lines
    cols = ("llm_calls", "prompt_tokens", "completion_tokens", "policy_rollouts", "cpu_s")
    capabilities = _table(
        "cost per capability (its synthesis, validation and training; + an equal share of collection, analysis and "
        "router)",
        "|".join(("capability", *cols, "own $", "shared $", "total $")).replace("_", " "),
    )
    for row in view.capabilities:
        capabilities.add_row(
            row.name, *_counters(row.counters, cols), row.own.text(), row.shared.text(), row.total.text()
        )
    return stages, capabilities, view.lines


def stage_times(values: dict[str, Any], elapsed_s: float | None = None) -> str | None:
    """One line: each stage's wall time (state `cost`, summed over resumes and over the capability branches, which run
    side by side, so a stage's time can exceed the run's) and, given, how long this invocation took; None before any."""
    spent = [(stage, float(c["wall_s"])) for stage, c in (values.get("cost") or {}).items() if "wall_s" in c]
    if not spent:
        return None
    parts = ", ".join(f"{stage} {s:.0f} s" for stage, s in spent)
    took = f"; this invocation took {elapsed_s / 60:.1f} min" if elapsed_s is not None else ""
    return f"stage times (summed over capability branches): {parts}{took}"


# runs of the graph, with checkpoints; a `rollouts` run is `gapforge rollouts collect`'s
GRAPH_KINDS = ("trace", "demo")


def runs_table(rows: list[tuple[Any, dict[str, Any]]]) -> Table:
    """One row per run: `values` is a graph run's state, or a rollouts run's `{"rollouts": {"episodes", "successes"}}`
    (its graph columns blank). The id never wraps (the other columns wrap to make room); no value ends in an ellipsis."""
    columns = "id|kind|started|status|env|episodes (pass)|stage|retained|trained|pass rate base → TRACE"
    table = _table("runs", columns, overflow="fold")
    table.columns[0].no_wrap = True
    for run, values in rows:
        config, r, ev = run.config or {}, values.get("rollouts") or {}, values.get("evaluation") or {}
        graph = run.kind in GRAPH_KINDS  # env: the target's spec
        env = ((config.get("config") or {}).get("rollouts") or {}).get("env") if graph else config.get("env")
        trained = sum(1 for c in (values.get("capabilities") or {}).values() if c.get("status") == "trained")
        rates = f"{_rate(ev.get('base'))} → {_rate(ev.get('trace_routed'))}"
        cells = [values.get("stage", "-"), str(len(values.get("retained") or [])), str(trained), rates]
        n = r.get("episodes")
        episodes = f"{n} ({100 * (r.get('successes') or 0) / n:.1f}%)" if n else "-"
        started = f"{run.created_at:%Y-%m-%d %H:%M}"
        table.add_row(run.id, run.kind, started, run.status, str(env or "-"), episodes, *(cells if graph else [""] * 4))
    return table


def history_table(run_id: str, entries: list[Any]) -> Table:
    table = _table(f"history of {run_id}", "step|checkpoint|node|time|what changed|next", overflow="fold")
    for e in entries:
        changed, after = "\n".join(e.changed) or "-", ", ".join(e.next) or "end"
        table.add_row(str(e.step), e.checkpoint_id, e.node, e.created_at[11:19], changed, after)
    return table


class ProgressView:
    """The live view of a run: on a terminal, a table of stages and capabilities redrawn as
    nodes finish (log lines scroll above it); piped, one line per finished node."""

    def __init__(self, console: Any, values: dict[str, Any] | None = None) -> None:
        self.console = console
        self.stages: dict[str, str] = dict((values or {}).get("stages") or {})
        self.capabilities: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in ((values or {}).get("capabilities") or {}).items()
        }
        self.live: Any = None

    def __enter__(self) -> ProgressView:  # noqa: PYI034
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def log(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, highlight=False, soft_wrap=True)

    def event(self, ev: Event) -> None:
        self.stages.update(ev.update.get("stages") or {})
        for name, row in (ev.update.get("capabilities") or {}).items():
            self.capabilities.setdefault(name, {}).update(row)
        if ev.capability:
            self.stages[ev.node] = f"running ({ev.capability})"
        self.log(progress_line(ev))
        if self.live is not None:
            self.live.update(self._render())

    def _render(self) -> Table:
        table = Table(
            "stage", "status", "capability", "status", title="progress", title_justify="left", show_edge=False
        )
        caps = [(n, r) for n, r in self.capabilities.items() if r.get("status") != "rejected"]
        for (stage, status), (name, row) in zip_longest(self.stages.items(), caps, fillvalue=("", None)):
            attempt = f" (attempt {row['attempts']})" if row and row.get("attempts") else ""
            table.add_row(stage, status or "", name, row.get("status", "") + attempt if name else "")
        return table
