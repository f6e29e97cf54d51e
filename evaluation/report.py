"""The report stage service: `write_report(store, run_id, out_dir)` writes `report.md` with tables and PNG plots
(matplotlib, Agg backend):

- `eval_pass_rate.png` / `eval_reward.png`: one bar per evaluated policy with its bootstrap 95% interval (evaluations
  `eval:*`);
- `eval_forest.png`: the episode-level paired difference in pass rate vs base (`vs_base_paired`, and per policy on the
  focus family from `vs_base_by_family`) with its 95% interval, N paired episodes in each row's label, a line at 0;
- the same section and plots (`unseen_eval_*.png`) for the unseen records when the run played them
  (`evaluation.unseen_env`, evaluations `unseen:*`);
- an oracle-routing section (evaluation.oracle; the stored `oracle` row, else computed from the stored episodes):
  routed TRACE against the best single policy per task picked on half the trials and scored on the other half, against
  each single policy on those trials, and the router's choices against the oracle's;
- the paper's protocol (evaluation.protocol_report): the `all_tasks:*` evaluations (every task, greedy, 1 trial; not
  held out) and, for a ToolSandbox target, perfect count and mean similarity per policy;
- scaling with capabilities (evaluation.scaling): routed TRACE with each adapter alone and with all of them, from the
  stored episodes, paired with the base per family; the gate's held-out accuracy (the stored router);
- `router_confusion.png`: the router's confusion matrix (evaluation `router_accuracy`);
- a comparison section: base / GRPO-on-target at the adapters' training budget / each adapter / routed TRACE
  (evaluation.comparison), and `rollout_scaling.png`: pass rate against training rollouts with 95% bands when the
  run's scaling curve was evaluated (evaluation.rollout_scaling);
- `adapter_heldout.png`: held-out synthetic reward per training step for each adapter (adapters' `metrics.curve`, a
  list of {step, reward, ...}, as training.service.register stores it).
A section whose data is missing says so instead of a plot. Never prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.evaluation.registry import labels, report_sections
from gapforge.evaluation.scaling import gate_line
from gapforge.evaluation.summary import UNSEEN, figure, interval, save_figure, signed, verdict

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(frozen=True)
class ReportResult:
    path: Path
    plots: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _bars(evals: list[Any], scope: str, key: str, title: str, path: Path) -> Path:
    names = [e.name.removeprefix(f"{scope}:") for e in evals]
    vals = [e.metrics[key]["value"] or 0.0 for e in evals]
    lows = [v - (e.metrics[key]["low"] or 0.0) for v, e in zip(vals, evals)]
    highs = [(e.metrics[key]["high"] or 0.0) - v for v, e in zip(vals, evals)]
    fig, ax = figure((max(5, 1.2 * len(names)), 3.5))
    ax.bar(names, vals, yerr=[lows, highs], capsize=4, color=["#888" if n == "base" else "#3a7" for n in names])
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, path)


def _more_trials(evals: list[Any], scope: str = "eval") -> list[str]:
    """A line per family some policies played with other than `trials` trials per task."""
    out = []
    for fam in sorted({f for e in evals for f in e.metrics.get("trials_by_family", {})}):
        ks = {
            e.name.removeprefix(f"{scope}:"): e.metrics["trials_by_family"].get(fam)
            for e in evals
            if "trials_by_family" in e.metrics
        }
        more = {n: k for n, k in ks.items() if k is not None and k != evals[0].metrics["trials"]}
        if more:
            who = ", ".join(f"{n} {k}" for n, k in more.items())
            out.append(f"Family `{fam}`: trials per task {who} (other policies {evals[0].metrics['trials']}).")
    return [*out, ""] if out else []


def paired_rows(
    evals: list[Any], labels: dict[str, str] | None = None, scope: str = "eval"
) -> list[tuple[str, str, dict[str, Any]]]:
    """(policy, scope, paired difference) for every non-base policy: all tasks, then the focus family, then the
    others; a policy named in `labels` is shown by its label."""
    rows = []
    for e in evals:
        m = e.metrics
        if e.name == f"{scope}:base" or not m.get("vs_base_paired"):
            continue
        name, focus, fams = e.name.removeprefix(f"{scope}:"), m.get("focus_family"), m.get("vs_base_by_family") or {}
        name = (labels or {}).get(name, name)
        rows.append((name, "all tasks", m["vs_base_paired"]))
        rows += [(name, f, fams[f]) for f in sorted(fams, key=lambda f: (f != focus, f))]
    return rows


def paired_table(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """The report's table of paired differences vs base (the model cards of `gapforge export` quote its rows)."""
    lines = [
        "| policy | scope | N paired episodes (tasks) | Δ pass rate | Δ reward | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for policy, where, d in rows:
        lines.append(
            f"| {policy} | {where} | {d.get('episodes', 0)} ({d.get('tasks', 0)}) | {signed(d.get('pass_rate'), pct=True)} | "
            f"{signed(d.get('mean_reward'), pct=False)} | {verdict(d.get('pass_rate')) or '–'} |"
        )
    return lines


def _forest(rows: list[tuple[str, str, dict[str, Any]]], path: Path, title: str) -> Path:
    rows = [r for r in rows if (r[2].get("pass_rate") or {}).get("value") is not None]
    labels = [
        f"{name}{'' if scope == 'all tasks' else ' · ' + scope} (N={d.get('episodes', 0)})" for name, scope, d in rows
    ]
    vals = [100 * d["pass_rate"]["value"] for _, _, d in rows]
    err = [
        [v - 100 * d["pass_rate"]["low"] for v, (_, _, d) in zip(vals, rows)],
        [100 * d["pass_rate"]["high"] - v for v, (_, _, d) in zip(vals, rows)],
    ]
    fig, ax = figure((10, 0.5 * len(rows) + 1.8))
    ys = list(range(len(rows)))[::-1]
    ax.errorbar(vals, ys, xerr=err, fmt="o", capsize=4, color="#3a7")
    ax.axvline(0, color="#888", linestyle="--", linewidth=1)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("Δ pass rate vs base, points (paired episodes, 95% interval)")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def _confusion(metrics: dict[str, Any], path: Path) -> Path:
    labels, matrix = metrics["labels"], metrics["matrix"]
    fig, ax = figure((1.2 * len(labels) + 2, 1.0 * len(labels) + 1.5))
    ax.imshow(matrix, cmap="Greens")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("routed to")
    ax.set_ylabel("expected")
    for i, row in enumerate(matrix):
        for j, n in enumerate(row):
            ax.text(j, i, str(n), ha="center", va="center")
    ax.set_title(f"router accuracy {metrics['accuracy']:.0%}" if metrics.get("accuracy") is not None else "router")
    return save_figure(fig, path)


def _curves(adapters: list[Any], path: Path) -> Path:
    fig, ax = figure((5.5, 3.5))
    for a in adapters:
        curve = a.metrics["curve"]
        ax.plot([p["step"] for p in curve], [p["reward"] for p in curve], marker="o", label=a.name)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out synthetic reward")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _evaluation_section(
    store: Store, run_id: str, out: Path, scope: str, plots: list[Path], missing: list[str]
) -> list[str]:
    """The section of one split's evaluation rows `<scope>:<policy>`: the held-out split (`eval`) or the unseen
    records (`unseen`: evaluation.unseen_env; its plots' files start with `unseen_`)."""
    evals = [e for e in store.evaluations(run_id) if e.name.startswith(f"{scope}:")]
    evals.sort(key=lambda e: (e.name != f"{scope}:base", e.name))
    held = scope == "eval"
    if not held and not evals:
        return []
    prefix, name = ("" if held else f"{scope}_"), (lambda e: e.name.removeprefix(f"{scope}:"))
    title = "the held-out split" if held else "the unseen records (evaluation.unseen_env)"
    lines = [f"## Evaluation on {title}", ""]
    if not evals:
        missing.append("evaluation")
        return [*lines, "No evaluation stored yet (run the evaluate stage).", ""]
    first = evals[0].metrics
    lines += [
        f"Env `{first['env']}`, {first['tasks']} tasks × {first['trials']} trials per policy; 95% bootstrap intervals over tasks.",
        "",
    ]
    lines += _more_trials(evals, scope)
    lines += [
        "| policy | pass rate | mean reward | pass^k | Δ pass rate vs base (over tasks) | Δ reward vs base (over tasks) |",
        "|---|---|---|---|---|---|",
    ]
    for e in evals:
        m = e.metrics
        ks = ", ".join(f"^{k}={v:.2f}" for k, v in m["pass_hat_k"].items() if v is not None)
        vs = m.get("vs_base") or {}
        lines.append(
            f"| {name(e)} | {interval(m['pass_rate'])} | {interval(m['mean_reward'], pct=False)} | {ks} | "
            f"{interval(vs.get('pass_rate'))} | {interval(vs.get('mean_reward'), pct=False)} |"
        )
    lines += ["", "### Per family (pass rate)", ""]
    families = sorted({f for e in evals for f in e.metrics.get("by_family", {})})
    lines += ["| policy | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
    for e in evals:
        fam = e.metrics.get("by_family", {})
        cells = " | ".join(interval(fam.get(f, {}).get("pass_rate")) for f in families)
        lines.append(f"| {name(e)} | {cells} |")
    paired = paired_rows(evals, labels(store, run_id), scope)
    if paired:
        focus = first.get("focus_family")
        lines += ["", "### Paired differences vs base (episode level)", ""]
        lines += [
            "Episode (task, trial i) of a policy minus episode (task, trial i) of base, over the pairs both played "
            "(common random numbers); 95% two-stage bootstrap intervals (tasks with replacement, then trials within each task)."
            + (f" Focus family: `{focus}`." if focus else ""),
            "",
            *paired_table(paired),
        ]
        forest = [r for r in paired if r[1] in ("all tasks", focus)]
        if any((d.get("pass_rate") or {}).get("value") is not None for _, _, d in forest):
            plots.append(_forest(forest, out / f"{prefix}eval_forest.png", f"{title}: {first['env']}"))
            lines += ["", f"![paired differences]({prefix}eval_forest.png)"]
    if not any(e.name == f"{scope}:baseline_grpo_target" for e in evals):
        lines += ["", "The GRPO-on-target baseline was not evaluated (no baseline adapter given)."]
    plots.append(_bars(evals, scope, "pass_rate", "pass rate (95% CI)", out / f"{prefix}eval_pass_rate.png"))
    plots.append(_bars(evals, scope, "mean_reward", "mean reward (95% CI)", out / f"{prefix}eval_reward.png"))
    return [*lines, "", f"![pass rate]({prefix}eval_pass_rate.png) ![mean reward]({prefix}eval_reward.png)", ""]


def write_report(store: Store, run_id: str, out_dir: str | Path, cost: list[str] | None = None) -> ReportResult:
    """report.md and its plots; `cost`: the cost section's lines (gapforge.pricing.cost_section), appended."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    router = store.get_evaluation(run_id, "router_accuracy")
    adapters = [a for a in store.adapters(run_id) if a.metrics.get("curve")]  # held-out reward per step
    plots: list[Path] = []
    missing: list[str] = []
    lines = [f"# gapforge report — run `{run_id}`", ""]
    for scope in ("eval", UNSEEN):  # the held-out split, then the unseen records (evaluation.unseen_env) when played
        lines += _evaluation_section(store, run_id, out, scope, plots, missing)

    sections, drawn = report_sections(store, run_id, out)  # every comparison's section (evaluation.registry)
    lines += sections
    plots += drawn

    record = store.get_evaluation(run_id, "router")  # the stored router: the gate's held-out accuracy
    gate = gate_line(record.metrics if record is not None else None)
    lines += ["## Router", "", *([f"{gate[0]}.", ""] if gate else [])]
    if router is not None:
        m = router.metrics
        lines += [
            f"Accuracy {m['accuracy']:.1%} on {len(m.get('cases', []))} cases (abstentions count as none: {m.get('abstained', 0)}); "
            f"prompt `{m.get('prompt')}`, margin {m.get('margin')}.",
            "",
        ]
        plots.append(_confusion(m, out / "router_confusion.png"))
        lines += ["![confusion](router_confusion.png)", ""]
    else:
        missing.append("router_accuracy")
        lines += ["No router accuracy stored yet.", ""]

    lines += ["## Adapters", ""]
    if adapters:
        lines += ["| adapter | capability | status | best step |", "|---|---|---|---|"]
        lines += [
            f"| {a.name} | {a.capability or '–'} | {a.status} | {a.metrics.get('best_step', '–')} |" for a in adapters
        ]
        plots.append(_curves(adapters, out / "adapter_heldout.png"))
        lines += ["", "![held-out reward](adapter_heldout.png)", ""]
    else:
        missing.append("adapters")
        lines += ["No adapter with a held-out reward curve stored yet.", ""]
    lines += cost or []
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ReportResult(path, plots, missing)
