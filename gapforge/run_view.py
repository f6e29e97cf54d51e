"""Rich renderings of graph state for `gapforge run / runs / state / history` (no logic)."""

from __future__ import annotations

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
        bits += [
            f"{k}={_num(v)}"
            for k, v in row.items()
            if k in ("status", "attempts", "verdict", "adapter", "heldout_after", "error")
        ]
    if "baseline" in u:
        bits.append(f"{u['baseline']['adapter']} ({u['baseline']['steps']} steps)")
    if "evaluation" in u:
        bits.append(", ".join(f"{name} {_rate(m)}" for name, m in u["evaluation"].items()))
    if u.get("report"):
        bits.append(str(u["report"]))
    return f"  {head}: " + "; ".join(b for b in bits if b)


def _kept(step: int | None) -> str:
    """Which checkpoint was kept; step 0 means training did not beat the untrained (identity) adapter."""
    if step is None:
        return ""
    return " (step 0: untrained)" if step == 0 else f" (step {step})"


def capability_table(values: dict[str, Any]) -> Table:
    table = Table(title="capabilities", title_justify="left")
    for col in (
        "capability",
        "status",
        "gap",
        "coverage",
        "kept",
        "attempts",
        "env verdict",
        "adapter",
        "held-out before→after",
        "error",
    ):
        table.add_column(col)
    for name, row in (values.get("capabilities") or {}).items():
        table.add_row(
            name,
            row.get("status", "-"),
            _num(row.get("gap")),
            _num(row.get("coverage")),
            _num(row.get("kept_passes")),
            _num(row.get("attempts")),
            row.get("verdict", "-"),
            row.get("adapter") or "-",
            f"{_num(row.get('heldout_before'))} → {_num(row.get('heldout_after'))}" + _kept(row.get("kept_step")),
            row.get("error", ""),
        )
    return table


def evaluation_table(values: dict[str, Any]) -> Table:
    table = Table(title="evaluation (held-out tasks)", title_justify="left")
    for col in ("policy", "pass rate", "mean reward", "episodes", "95% CI"):
        table.add_column(col)
    for name, m in (values.get("evaluation") or {}).items():
        ci = f"[{_num(m.get('ci_low'))}, {_num(m.get('ci_high'))}]" if m.get("ci_low") is not None else "-"
        table.add_row(name, _rate(m), _num(m.get("mean_reward")), _num(m.get("n")), ci)
    return table


def cost_table(values: dict[str, Any]) -> Table:
    table = Table(title="cost per stage", title_justify="left")
    cols = ("llm_calls", "prompt_tokens", "completion_tokens", "policy_rollouts", "cpu_s", "gpu_s", "wall_s")
    table.add_column("stage")
    for col in cols:
        table.add_column(col.replace("_", " "))
    for stage, counters in (values.get("cost") or {}).items():
        table.add_row(stage, *(_num(counters.get(c), 1) if counters.get(c) else "-" for c in cols))
    return table


def stage_times(values: dict[str, Any], elapsed_s: float | None = None) -> str | None:
    """One line: each stage's wall time (state `cost`, summed over resumes and over the capability branches, which run
    side by side, so a stage's time can exceed the run's) and, given, how long this invocation took; None before any."""
    spent = [(stage, float(c["wall_s"])) for stage, c in (values.get("cost") or {}).items() if "wall_s" in c]
    if not spent:
        return None
    parts = ", ".join(f"{stage} {s:.0f} s" for stage, s in spent)
    took = f"; this invocation took {elapsed_s / 60:.1f} min" if elapsed_s is not None else ""
    return f"stage times (summed over capability branches): {parts}{took}"


GRAPH_KINDS = (
    "trace",
    "demo",
)  # runs of the graph, with checkpoints; a `rollouts` run is `gapforge rollouts collect`'s


def runs_table(rows: list[tuple[Any, dict[str, Any]]]) -> Table:
    """One row per run: `values` is a graph run's state, or a rollouts run's `{"rollouts": {"episodes", "successes"}}`
    (its graph columns blank). The id never wraps (the other columns wrap to make room); no value ends in an ellipsis."""
    table = Table(title="runs", title_justify="left")
    for col in (
        "id",
        "kind",
        "started",
        "status",
        "env",
        "episodes (pass)",
        "stage",
        "retained",
        "trained",
        "pass rate base → TRACE",
    ):
        table.add_column(col, no_wrap=col == "id", overflow="fold")
    for run, values in rows:
        config, r, ev = run.config or {}, values.get("rollouts") or {}, values.get("evaluation") or {}
        graph = run.kind in GRAPH_KINDS
        env = (
            ((config.get("config") or {}).get("rollouts") or {}).get("env") if graph else config.get("env")
        )  # the target's spec
        trained = sum(1 for c in (values.get("capabilities") or {}).values() if c.get("status") == "trained")
        cells = [
            values.get("stage", "-"),
            str(len(values.get("retained") or [])),
            str(trained),
            f"{_rate(ev.get('base'))} → {_rate(ev.get('trace_routed'))}",
        ]
        table.add_row(
            run.id,
            run.kind,
            f"{run.created_at:%Y-%m-%d %H:%M}",
            run.status,
            str(env or "-"),
            f"{r['episodes']} ({100 * (r.get('successes') or 0) / r['episodes']:.1f}%)" if r.get("episodes") else "-",
            *(cells if graph else [""] * len(cells)),
        )
    return table


def history_table(run_id: str, entries: list[Any]) -> Table:
    table = Table(title=f"history of {run_id}", title_justify="left")
    for col in ("step", "checkpoint", "node", "time", "what changed", "next"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(
            str(e.step),
            e.checkpoint_id,
            e.node,
            e.created_at[11:19],
            "\n".join(e.changed) or "-",
            ", ".join(e.next) or "end",
        )
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
        table = Table(title="progress", title_justify="left", show_edge=False)
        table.add_column("stage")
        table.add_column("status")
        table.add_column("capability")
        table.add_column("status")
        caps = [(n, r) for n, r in self.capabilities.items() if r.get("status") != "rejected"]
        rows = max(len(self.stages), len(caps))
        stages = list(self.stages.items())
        for i in range(rows):
            s = stages[i] if i < len(stages) else ("", "")
            c = caps[i] if i < len(caps) else ("", {})
            detail = (
                c[1].get("status", "") + (f" (attempt {c[1]['attempts']})" if c[1].get("attempts") else "")
                if c[0]
                else ""
            )
            table.add_row(s[0], s[1], c[0], detail)
        return table
