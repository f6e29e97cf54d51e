"""The report stage service: `write_report(store, run_id, out_dir)` writes
`report.md` with tables and PNG plots (matplotlib, Agg backend):

- `eval_pass_rate.png` / `eval_reward.png`: one bar per evaluated policy with its
  bootstrap 95% interval (evaluations `eval:*`);
- `router_confusion.png`: the router's confusion matrix (evaluation `router_accuracy`);
- `adapter_heldout.png`: held-out synthetic reward per training step for each
  adapter (adapters' `metrics.heldout_curve`, a list of {step, reward}, as training/ stores it).
A section whose data is missing says so instead of a plot. Never prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReportResult:
    path: Path
    plots: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _fmt(iv: dict[str, Any] | None, pct: bool = True) -> str:
    if not iv or iv.get("value") is None:
        return "–"
    scale, unit = (100.0, "%") if pct else (1.0, "")
    return f"{iv['value'] * scale:.1f}{unit} [{iv['low'] * scale:.1f}, {iv['high'] * scale:.1f}]"


def _bars(evals: list[Any], key: str, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [e.name.removeprefix("eval:") for e in evals]
    vals = [e.metrics[key]["value"] or 0.0 for e in evals]
    lows = [v - (e.metrics[key]["low"] or 0.0) for v, e in zip(vals, evals)]
    highs = [(e.metrics[key]["high"] or 0.0) - v for v, e in zip(vals, evals)]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(names)), 3.5))
    ax.bar(names, vals, yerr=[lows, highs], capsize=4, color=["#888" if n == "base" else "#3a7" for n in names])
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _confusion(metrics: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, matrix = metrics["labels"], metrics["matrix"]
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2, 1.0 * len(labels) + 1.5))
    ax.imshow(matrix, cmap="Greens")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("routed to")
    ax.set_ylabel("expected")
    for i, row in enumerate(matrix):
        for j, n in enumerate(row):
            ax.text(j, i, str(n), ha="center", va="center")
    ax.set_title(f"router accuracy {metrics['accuracy']:.0%}" if metrics.get("accuracy") is not None else "router")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _curves(adapters: list[Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for a in adapters:
        curve = a.metrics["heldout_curve"]
        ax.plot([p["step"] for p in curve], [p["reward"] for p in curve], marker="o", label=a.name)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out synthetic reward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(store: Any, run_id: str, out_dir: str | Path) -> ReportResult:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    evals = [e for e in store.evaluations(run_id) if e.name.startswith("eval:")]
    evals.sort(key=lambda e: (e.name != "eval:base", e.name))
    router = store.get_evaluation(run_id, "router_accuracy")
    adapters = [a for a in store.adapters(run_id) if a.metrics.get("heldout_curve")]
    plots: list[Path] = []
    missing: list[str] = []
    lines = [f"# gapforge report — run `{run_id}`", ""]

    lines += ["## Evaluation on the held-out split", ""]
    if evals:
        first = evals[0].metrics
        lines += [f"Env `{first['env']}`, {first['tasks']} tasks × {first['trials']} trials per policy; 95% bootstrap intervals over tasks.", ""]
        lines += ["| policy | pass rate | mean reward | pass^k | Δ pass rate vs base | Δ reward vs base |", "|---|---|---|---|---|---|"]
        for e in evals:
            m = e.metrics
            ks = ", ".join(f"^{k}={v:.2f}" for k, v in m["pass_hat_k"].items() if v is not None)
            vs = m.get("vs_base") or {}
            lines.append(
                f"| {e.name.removeprefix('eval:')} | {_fmt(m['pass_rate'])} | {_fmt(m['mean_reward'], pct=False)} | {ks} | "
                f"{_fmt(vs.get('pass_rate'))} | {_fmt(vs.get('mean_reward'), pct=False)} |"
            )
        lines += ["", "### Per family (pass rate)", ""]
        families = sorted({f for e in evals for f in e.metrics.get("by_family", {})})
        lines += ["| policy | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
        for e in evals:
            fam = e.metrics.get("by_family", {})
            lines.append(f"| {e.name.removeprefix('eval:')} | " + " | ".join(_fmt(fam.get(f, {}).get("pass_rate")) for f in families) + " |")
        if not any(e.name == "eval:baseline_grpo_target" for e in evals):
            lines += ["", "The GRPO-on-target baseline was not evaluated (no baseline adapter given)."]
        plots.append(_bars(evals, "pass_rate", "pass rate (95% CI)", out / "eval_pass_rate.png"))
        plots.append(_bars(evals, "mean_reward", "mean reward (95% CI)", out / "eval_reward.png"))
        lines += ["", "![pass rate](eval_pass_rate.png) ![mean reward](eval_reward.png)", ""]
    else:
        missing.append("evaluation")
        lines += ["No evaluation stored yet (run the evaluate stage).", ""]

    lines += ["## Router", ""]
    if router is not None:
        m = router.metrics
        lines += [f"Accuracy {m['accuracy']:.1%} on {len(m.get('cases', []))} cases (abstentions count as none: {m.get('abstained', 0)}); prompt `{m.get('prompt')}`, margin {m.get('margin')}.", ""]
        plots.append(_confusion(m, out / "router_confusion.png"))
        lines += ["![confusion](router_confusion.png)", ""]
    else:
        missing.append("router_accuracy")
        lines += ["No router accuracy stored yet.", ""]

    lines += ["## Adapters", ""]
    if adapters:
        lines += ["| adapter | capability | status | best step |", "|---|---|---|---|"]
        lines += [f"| {a.name} | {a.capability or '–'} | {a.status} | {a.metrics.get('best_step', '–')} |" for a in adapters]
        plots.append(_curves(adapters, out / "adapter_heldout.png"))
        lines += ["", "![held-out reward](adapter_heldout.png)", ""]
    else:
        missing.append("adapters")
        lines += ["No adapter with a held-out reward curve stored yet.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ReportResult(path, plots, missing)
