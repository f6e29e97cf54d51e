"""TRACE against GRPO on the target at the same training rollout budget: the lines `gapforge demo` ends with and the
report's comparison section (issue 49; the paper's Table 1 question, offline).

One row per policy: base, GRPO-on-target (equal budget), each single adapter, routed TRACE; each with its pass rate,
its paired difference to the base with the 95% interval (the stored `vs_base_paired`), and what it cost to train:
training rollouts (steps x rollouts per step, from the adapters' stored results) and training wall time. TRACE's
budget is given both ways: its adapters' training rollouts alone, and with the synthesis stage's GRPO-readiness and
self-test rollouts added (each attempt's stored verdict counts them). The verdict of TRACE against GRPO-on-target
comes from their own paired difference, episode (task, i) of one against episode (task, i) of the other (both play the
same (task, sample) seeds): "TRACE ahead" when the 95% interval is above 0, "GRPO-on-target ahead" when below, else
"tied".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.evaluation import stats
from gapforge.evaluation.comparisons import Comparison
from gapforge.evaluation.oracle import policy_episodes
from gapforge.evaluation.summary import BASE, GRPO_TARGET, ROUTED, UNSEEN, points, scope_metrics, verdict

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(frozen=True)
class TrainingCost:
    rollouts: int
    wall_s: float
    kept_step: int | None = None  # the step its held-out selection kept (0: the untrained adapter, i.e. the base)


def training_costs(store: Store, run_id: str, rollouts_per_step: int) -> dict[str, TrainingCost]:
    """{adapter name: its training rollouts and wall time} of every finished adapter of the run."""
    out = {}
    for a in store.adapters(run_id):
        if a.status == "done":
            m = a.metrics or {}
            kept = m.get("best_step")
            out[a.name] = TrainingCost(
                int(m.get("steps") or 0) * rollouts_per_step,
                float(m.get("wall_s") or 0.0),
                None if kept is None else int(kept),
            )
    return out


def synthesis_rollouts(store: Store, run_id: str) -> int:
    """Policy rollouts the synthesis stage played (GRPO readiness and self-test), over every attempt of every capability."""
    total = 0
    for env in store.synthetic_envs(run_id):
        v = store.get_validation(env.id)
        if v is not None:
            total += int(((v.report or {}).get("verdict") or {}).get("rollouts", 0))
    return total


def paired_between(
    store: Store, a: Mapping[str, Any], b: Mapping[str, Any], *, focus: str | None = None, seed: int = 0
) -> dict[str, Any]:
    """Policy a minus policy b, paired episode by episode: over all tasks and (focus) over that family's tasks."""
    ea, eb = policy_episodes(store, a), policy_episodes(store, b)
    out = {"all tasks": stats.paired_episodes(ea, eb, seed=seed)}
    if focus:
        tasks = {r.task_id for r in store.episodes(a["child_run"], env=a.get("env")) if r.task_family == focus}
        out[focus] = stats.paired_episodes(ea, eb, tasks=tasks, seed=seed)
    return out


def trace_vs_grpo_word(d: Mapping[str, Any] | None) -> str:
    word = verdict((d or {}).get("pass_rate"))
    return {
        "gain": "TRACE ahead",
        "loss": "GRPO-on-target ahead",
        "no effect": "tied (the 95% interval contains 0)",
    }.get(word or "", "no verdict")


def comparison_lines(
    metrics: Mapping[str, Mapping[str, Any]],
    costs: Mapping[str, TrainingCost],
    *,
    synthesis: int = 0,
    budget: int | None = None,
    trace_vs_grpo: Mapping[str, Mapping[str, Any]] | None = None,
    where: str = "the held-out split",
) -> list[str]:
    """The comparison table as lines (pure). `metrics`: evaluation name -> stored metrics; `costs`: adapter name ->
    TrainingCost; `synthesis`: TRACE's readiness + self-test rollouts; `budget`:
    training.budget.training_rollout_budget; `trace_vs_grpo`: scope -> paired difference of TRACE minus GRPO-on-target
    (`paired_between`); `where`: the split the metrics are of."""
    if BASE not in metrics or ROUTED not in metrics:
        return []
    adapters = sorted(n.removeprefix("adapter:") for n in metrics if n.startswith("adapter:"))
    trace_cost = TrainingCost(
        sum(costs[a].rollouts for a in adapters if a in costs), sum(costs[a].wall_s for a in adapters if a in costs)
    )
    rows: list[tuple[str, str, TrainingCost | None]] = [("base", BASE, None)]
    if GRPO_TARGET in metrics:
        rows.append(("GRPO-on-target (equal budget)", GRPO_TARGET, costs.get(GRPO_TARGET)))
    rows += [(f"adapter {a}", f"adapter:{a}", costs.get(a)) for a in adapters]
    rows.append(("TRACE (routed)", ROUTED, trace_cost))
    width = max(len(label) for label, _, _ in rows)
    budget_note = f"; budget {budget} training rollouts" if budget else ""
    lines = [f"comparison on {where} (paired with base: same tasks, same trials{budget_note}):"]
    for label, name, cost in rows:
        m = metrics[name]
        pr = (m.get("pass_rate") or {}).get("value")
        rate = "–" if pr is None else f"{pr:6.1%}"
        d = m.get("vs_base_paired") or {}
        if name == BASE:
            diff, spent = "", "  0 training rollouts"
        else:
            diff = "  vs base: no paired episodes"
            if (d.get("pass_rate") or {}).get("value") is not None:
                diff = f"  vs base {points(d['pass_rate'])} ({d.get('episodes', 0)} pairs)"
            spent = "" if cost is None else f"  {cost.rollouts} training rollouts, {cost.wall_s:.0f} s"
        if cost is not None and cost.kept_step is not None and name != ROUTED:
            spent += f", kept step {cost.kept_step}"
        if name == ROUTED and synthesis and cost is not None:
            spent += f" ({cost.rollouts + synthesis} with synthesis' {synthesis} readiness and self-test rollouts)"
        lines.append(f"  {label:<{width}}  {rate}{diff}{spent}")
    grpo_cost = costs.get(GRPO_TARGET)
    if GRPO_TARGET in metrics and grpo_cost is not None and grpo_cost.kept_step == 0:
        lines.append(
            "GRPO-on-target kept its step 0 (no later checkpoint beat it beyond noise on its own selection tasks): it "
            "plays as the base; rollout_scaling (evaluation.comparisons) scores every kept fraction of its training"
        )
    if GRPO_TARGET not in metrics:
        lines.append(
            "TRACE vs GRPO-on-target: not compared (the baseline was not evaluated: not in evaluation.comparisons)"
        )
    for scope, d in (trace_vs_grpo or {}).items():
        if (d.get("pass_rate") or {}).get("value") is None:
            continue
        lines.append(
            f"TRACE − GRPO-on-target ({scope}): {points(d['pass_rate'])}, {d.get('episodes', 0)} paired episodes: "
            f"{trace_vs_grpo_word(d)}"
        )
    return lines


def comparison(store: Store, run_id: str, cfg: Any = None, scope: str = "eval") -> list[str]:
    """The comparison lines of a run from the store (`cfg`: the run's GapforgeConfig; None: its training section and
    seed as stored with the run), over the held-out split's rows (`scope` eval) or the unseen records' (unseen)."""
    from types import SimpleNamespace

    from gapforge.training.budget import training_rollout_budget
    from gapforge.training.config import TrainingConfig

    metrics = scope_metrics(store, run_id, scope)
    if BASE not in metrics or ROUTED not in metrics or not metrics[ROUTED].get("child_run"):
        return []
    if cfg is None:
        stored = store.get_run(run_id).config or {}
        stored = stored.get("config", stored)  # a graph run stores {command, config, graph, target}
        training = TrainingConfig.model_construct(**(stored.get("training") or {}))  # validated when it was stored
        cfg = SimpleNamespace(training=training, seed=int(stored.get("seed") or 0))
    adapters = [n for n in metrics if n.startswith("adapter:")]
    vs = None
    if GRPO_TARGET in metrics:
        vs = paired_between(
            store, metrics[ROUTED], metrics[GRPO_TARGET], focus=metrics[ROUTED].get("focus_family"), seed=cfg.seed
        )
    return comparison_lines(
        metrics,
        training_costs(store, run_id, cfg.training.rollouts_per_step),
        synthesis=synthesis_rollouts(store, run_id),
        budget=training_rollout_budget(cfg, len(adapters)),
        trace_vs_grpo=vs,
        where="the held-out split" if scope == "eval" else f"the unseen records ({metrics[BASE].get('env')})",
    )


def comparisons(store: Store, run_id: str, cfg: Any = None) -> list[str]:
    """`comparison` of the held-out split, then of the unseen records when the run played them."""
    return [*comparison(store, run_id, cfg), *comparison(store, run_id, cfg, UNSEEN)]


def comparison_section(store: Store, run_id: str) -> list[str]:
    """The report's section: the comparison lines of `comparison`, as stored with the run."""
    lines = comparisons(store, run_id)
    if not lines:
        return []
    return [
        "## Against GRPO on the target (equal training budget)",
        "",
        "GRPO on the target: one LoRA adapter trained with the adapters' GRPO/LoRA settings on the analysis split's tasks "
        "for the training rollouts of all capability adapters together (training.budget).",
        "",
        "```",
        *lines,
        "```",
        "",
    ]


class _GrpoOnTarget(Comparison):
    """GRPO on the target at the adapters' training budget: trained by the `train_baseline` node when
    `baseline_grpo_target` is in `evaluation.comparisons` (gapforge/stages/training.py), played whenever the backend holds its adapter
    (also one given by hand: `gapforge evaluate --baseline-adapter`)."""

    name, kind, optional = GRPO_TARGET, "baseline", True

    def policies(
        self, base: Any, backend: Any, capabilities: Sequence[dict[str, str]], temperature: float, prepared: Any
    ) -> dict[str, Any]:
        if GRPO_TARGET not in backend.adapters:
            return {}
        return {GRPO_TARGET: backend.policy(GRPO_TARGET, temperature=temperature, name=GRPO_TARGET)}

    def report(
        self, store: Store, run_id: str, out_dir: Path, labels: Mapping[str, str]
    ) -> tuple[list[str], list[Path]]:
        return comparison_section(store, run_id), []

    def lines(self, store: Store, run_id: str, cfg: Any) -> list[str]:
        return comparisons(store, run_id, cfg)


GRPO_COMPARISON = _GrpoOnTarget()
