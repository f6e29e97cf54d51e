"""The evaluation's summary in the trackers of `training.report_to` (training/tracking.py places each adapter's
training there): one run `RUN/evaluation` in the run's group holding, per split (`eval`: the held-out split,
`unseen`: evaluation.unseen_env) and policy, the pass rate and mean reward with their intervals and the paired
difference vs base over all tasks and per family; and, as text, the lines the evaluation printed (the summary and the
comparison) and the report's table of paired differences.

    scalars = summary_scalars(store, run_id)    # {"eval/trace_routed/pass_rate": 0.55, ...}
    log_evaluation(["tensorboard"], store, run_id, workspace / "tracking" / run_id / "evaluation")

A tracker that fails (not logged in, its server down) never fails the evaluation: `log_evaluation` returns the
problems, one line each, for the stage to print.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.evaluation.summary import UNSEEN

if TYPE_CHECKING:
    from gapforge.store import Store

SCOPES = ("eval", UNSEEN)


def _interval(out: dict[str, float], key: str, iv: Any) -> None:
    if isinstance(iv, dict) and iv.get("value") is not None:
        out[key] = float(iv["value"])
        for end in ("low", "high"):
            if iv.get(end) is not None:
                out[f"{key}_{end}"] = float(iv[end])


def summary_scalars(store: Store, run_id: str) -> dict[str, float]:
    """`<split>/<policy>/<metric>` -> value for every stored evaluation row of both splits."""
    out: dict[str, float] = {}
    for e in store.evaluations(run_id):
        scope, _, policy = e.name.partition(":")
        if scope not in SCOPES or not policy:
            continue
        m, key = e.metrics, f"{scope}/{policy}"
        _interval(out, f"{key}/pass_rate", m.get("pass_rate"))
        _interval(out, f"{key}/mean_reward", m.get("mean_reward"))
        _interval(out, f"{key}/vs_base/pass_rate", (m.get("vs_base_paired") or {}).get("pass_rate"))
        for family, d in (m.get("vs_base_by_family") or {}).items():
            _interval(out, f"{key}/vs_base/{family}/pass_rate", (d or {}).get("pass_rate"))
        if m.get("episodes") is not None:
            out[f"{key}/episodes"] = float(m["episodes"])
    return out


def summary_text(store: Store, run_id: str) -> str:
    """Markdown: the end-of-evaluation lines and the comparison per split, then the report's paired table."""
    from gapforge.evaluation.comparison import comparisons
    from gapforge.evaluation.registry import labels
    from gapforge.evaluation.report import paired_rows, paired_table
    from gapforge.evaluation.summary import headline, scope_metrics

    lines = [f"# gapforge run {run_id}: evaluation", ""]
    for scope in SCOPES:
        metrics = scope_metrics(store, run_id, scope)
        if not metrics:
            continue
        evals = [e for e in store.evaluations(run_id) if e.name.startswith(f"{scope}:")]
        lines += [f"## {scope}", "", *(f"    {line}" for line in headline(metrics)), ""]
        lines += [*paired_table(paired_rows(evals, labels(store, run_id), scope)), ""]
    lines += [f"    {line}" for line in comparisons(store, run_id)]
    return "\n".join(lines) + "\n"


def _tensorboard(where: Path, scalars: dict[str, float], text: str) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(where)) as writer:
        for key, value in sorted(scalars.items()):
            writer.add_scalar(key, value, global_step=0)
        writer.add_text("evaluation", text, global_step=0)


def _wandb(run_id: str, scalars: dict[str, float], text: str) -> None:
    import wandb

    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "huggingface"),  # where TRL's callback puts the training runs
        group=os.environ.get("WANDB_RUN_GROUP", run_id),
        name=f"{run_id}/evaluation",
        job_type="evaluation",
    )
    try:
        run.summary.update(scalars)
        run.log({"evaluation": wandb.Html(f"<pre>{text}</pre>")})
    finally:
        run.finish()


def _trackio(run_id: str, scalars: dict[str, float], text: str) -> None:
    import trackio

    trackio.init(project=run_id, name=f"{run_id}/evaluation", config={"summary": text})
    try:
        trackio.log(scalars)
    finally:
        trackio.finish()


def log_evaluation(report_to: list[str], store: Store, run_id: str, where: Path) -> list[str]:
    """The run's evaluation summary to every tracker in `report_to` (tensorboard: event files in `where`); returns a
    line per tracker that failed (nothing raised)."""
    if not report_to:
        return []
    try:
        scalars, text = summary_scalars(store, run_id), summary_text(store, run_id)
    except Exception as e:  # the evaluation is stored: a summary that cannot be built is a line, not a failed stage
        return [f"the evaluation summary was not built for the trackers ({type(e).__name__}: {str(e)[:200]})"]
    writers = {
        "tensorboard": lambda: _tensorboard(where, scalars, text),
        "wandb": lambda: _wandb(run_id, scalars, text),
        "trackio": lambda: _trackio(run_id, scalars, text),
    }
    problems = []
    for name in report_to:
        try:
            writers[name]()
        except Exception as e:  # a tracker's own failure: the evaluation stands, the line says what was not logged
            problems.append(f"{name}: the evaluation summary was not logged ({type(e).__name__}: {str(e)[:200]})")
    return problems
