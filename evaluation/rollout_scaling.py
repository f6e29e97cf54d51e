"""Pass rate against training rollouts (the paper's Fig. 4): routed TRACE and GRPO on the target at the fractions 0,
1/4, 1/2, 3/4, 1 of their training, on the held-out split, paired with the base.

Training keeps each adapter's LoRA weights at step round(f * max_steps) (training.curve; the adapters' results list
them as `curve_adapters`). Point k of the curve is every capability adapter at its k-th kept step, routed by the run's
router, and the GRPO-on-target adapter at its k-th kept step; since the baseline trains for the budget of all adapters
together (training.budget), both have spent the same training rollouts at every point. Point 0 is the fresh adapter
(its LoRA B matrices are zero): the base policy itself, so it is the base's own evaluation and is not played again.

Each point k > 0 is evaluated as a run of its own, `<run>.scale-k` (rows `eval:<policy>`, child runs
`<run>.scale-k.eval.<policy>`), by the `rollout_scaling` comparison after the run's evaluation
(`rollout_scaling` in `evaluation.comparisons`), on the run's held-out tasks with the run's trials, through the same evaluation service,
policies and worker processes. The base's stored episodes are copied into the point's base child run first, so no
point plays the base again and every point is paired with the same base episodes under common random numbers; the
router is the run's own (it routes with the base weights to the point's adapters). Resumable: a point's stored
episodes are kept. `scaling_rows` reads them back; `scaling_plot` draws them with 95% bands; `per_1000` is the points
gained per 1,000 training rollouts (from the base to the last point).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.evaluation.comparisons import Comparison
from gapforge.evaluation.summary import BASE, GRPO_TARGET, ROUTED, scope_metrics, verdict
from gapforge.faults import InputFault

if TYPE_CHECKING:
    from gapforge.evaluation.comparisons import Evaluation
    from gapforge.store import Store


class ScalingError(InputFault, ValueError):
    """The run has no curve to evaluate (say what to train)."""


def scale_run_id(run_id: str, k: int) -> str:
    return f"{run_id}.scale-{k}"


def _fraction(entry: Mapping[str, Any]) -> float:
    """The fraction of its training a curve adapter was kept at (its `curve.json`, written by training.curve)."""
    if "fraction" in entry:
        return round(float(entry["fraction"]), 6)
    return round(float(json.loads((Path(entry["path"]) / "curve.json").read_text())["fraction"]), 6)


def curve_points(
    adapters: Sequence[Any], names: Sequence[str], optional: Sequence[str] = ()
) -> list[dict[str, dict[str, Any]]]:
    """[{adapter name: {step, training_rollouts, path}}] per curve point, matched by the fraction of its training each
    adapter was kept at, for the adapters `names` (rows of the store's `adapters`: their `metrics.curve_adapters`),
    each of which must have every point, and `optional` ones (the GRPO-on-target baseline), in a point where they have
    it (one stopped early lacks its later points)."""
    by_name = {a.name: {_fraction(c): c for c in (a.metrics or {}).get("curve_adapters") or []} for a in adapters}
    missing = [n for n in [*names, *optional] if not by_name.get(n)]
    if missing:
        raise ScalingError(
            f"no scaling-curve adapters kept for {', '.join(missing)}: train again (training.curve keeps them)"
        )
    fractions = sorted(set.intersection(*(set(by_name[n]) for n in names))) if names else []
    if names and len(fractions) != max(len(by_name[n]) for n in names):
        raise ScalingError(
            f"the adapters kept different curve points ({ {n: sorted(by_name[n]) for n in names} }): train with "
            "training.early_stopping=false and the same training.curve_fractions"
        )
    return [{n: by_name[n][f] for n in [*names, *optional] if f in by_name[n]} for f in fractions]


def run_curve_points(adapters: Sequence[Any]) -> list[dict[str, dict[str, Any]]]:
    """`curve_points` of a run's trained adapters (rows of the store's `adapters`; those not `done` are left out):
    every capability adapter at every point, the GRPO-on-target baseline where it has the point."""
    done = [a for a in adapters if a.status == "done"]
    names = sorted(a.name for a in done if a.name != GRPO_TARGET)
    return curve_points(done, names, [GRPO_TARGET] if len(names) < len(done) else [])


def _iv(m: Mapping[str, Any] | None, key: str = "pass_rate") -> dict[str, Any]:
    return dict(((m or {}).get(key) or {}))


def scaling_rows(
    store: Store, run_id: str, points: Sequence[Mapping[str, Mapping[str, Any]]], *, seed: int = 0
) -> list[dict[str, Any]]:
    """One row per curve point: training rollouts of TRACE (all adapters) and of GRPO-on-target, each one's pass rate
    and paired difference to the base (95% intervals), and TRACE − GRPO-on-target paired. Point 0 is the base's own
    evaluation (see the module docstring); a point not evaluated yet is left out."""

    main = scope_metrics(store, run_id)
    if BASE not in main:
        raise ScalingError(f"run {run_id} has no evaluation of the base: evaluate it first")
    known = {r.id for r in store.list_runs()} if hasattr(store, "list_runs") else None
    rows = []
    for k, point in enumerate(points):
        trace_rollouts = sum(int(c["training_rollouts"]) for n, c in point.items() if n != GRPO_TARGET)
        grpo_rollouts = int(point[GRPO_TARGET]["training_rollouts"]) if GRPO_TARGET in point else None
        row: dict[str, Any] = {"point": k, "trace_rollouts": trace_rollouts, "grpo_rollouts": grpo_rollouts}
        if k == 0:
            zero = {"value": 0.0, "low": 0.0, "high": 0.0}
            row |= dict.fromkeys(("trace", "grpo"), _iv(main[BASE]))
            rows.append(row | dict.fromkeys(("trace_vs_base", "grpo_vs_base", "trace_vs_grpo"), zero) | {"run": run_id})
            continue
        if known is not None and scale_run_id(run_id, k) not in known:  # not evaluated (yet)
            continue
        scaled = scope_metrics(store, scale_run_id(run_id, k))
        if ROUTED not in scaled:
            continue
        routed, grpo = scaled[ROUTED], scaled.get(GRPO_TARGET)
        row |= {"run": scale_run_id(run_id, k), "trace": _iv(routed)}
        row["trace_vs_base"] = _iv(routed.get("vs_base_paired"))
        if grpo is not None:
            from gapforge.evaluation.comparison import paired_between

            row |= {"grpo": _iv(grpo), "grpo_vs_base": _iv(grpo.get("vs_base_paired"))}
            row["trace_vs_grpo"] = _iv(paired_between(store, routed, grpo, seed=seed)["all tasks"])
        rows.append(row)
    return rows


def per_1000(rows: Sequence[Mapping[str, Any]], who: str) -> float | None:
    """Points of pass rate gained over the base per 1,000 training rollouts, at the last evaluated point."""
    last = [r for r in rows if r.get(f"{who}_vs_base", {}).get("value") is not None and r.get(f"{who}_rollouts")]
    if not last:
        return None
    r = last[-1]
    return 100 * r[f"{who}_vs_base"]["value"] / r[f"{who}_rollouts"] * 1000


def verdict_word(iv: Mapping[str, Any] | None) -> str:
    """TRACE − GRPO-on-target: 'TRACE ahead' (interval above 0), 'GRPO ahead' (below), else 'tied'."""
    return {"gain": "TRACE ahead", "loss": "GRPO ahead", "no effect": "tied"}.get(verdict(iv) or "", "–")


def scaling_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows as a markdown table."""

    def pct(iv: Mapping[str, Any] | None, signed: bool = False) -> str:
        if not iv or iv.get("value") is None:
            return "–"
        f = "{:+.1f}" if signed else "{:.1f}"
        return f"{f.format(100 * iv['value'])} [{f.format(100 * iv['low'])}, {f.format(100 * iv['high'])}]"

    out = [
        "| point | TRACE rollouts | TRACE pass rate | TRACE − base | GRPO rollouts | GRPO pass rate | GRPO − base | TRACE − GRPO | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['point']} | {r['trace_rollouts']} | {pct(r.get('trace'))} | {pct(r.get('trace_vs_base'), True)} | "
            f"{r.get('grpo_rollouts') if r.get('grpo_rollouts') is not None else '–'} | {pct(r.get('grpo'))} | "
            f"{pct(r.get('grpo_vs_base'), True)} | {pct(r.get('trace_vs_grpo'), True)} | "
            f"{verdict_word(r.get('trace_vs_grpo')) if r['point'] else 'both are the base'} |"
        )
    return out


def scaling_plot(series: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path) -> Path:
    """Pass rate against training rollouts, one line with its 95% band per (label, policy): `series` maps a label
    (e.g. a training seed) to its `scaling_rows`."""
    from gapforge.evaluation.summary import figure, save_figure

    fig, ax = figure((6.5, 4))
    styles = {"trace": ("TRACE (routed)", "#3a7"), "grpo": ("GRPO on the target", "#c63")}
    for i, (label, rows) in enumerate(series.items()):
        for who, (name, color) in styles.items():
            pts = [
                r for r in rows if (r.get(who) or {}).get("value") is not None and r.get(f"{who}_rollouts") is not None
            ]
            if not pts:
                continue
            xs = [r[f"{who}_rollouts"] for r in pts]
            ax.plot(
                xs,
                [100 * r[who]["value"] for r in pts],
                marker="o",
                color=color,
                alpha=0.9 - 0.2 * i,
                label=f"{name}{'' if len(series) == 1 else f' ({label})'}",
            )
            ax.fill_between(
                xs, [100 * r[who]["low"] for r in pts], [100 * r[who]["high"] for r in pts], color=color, alpha=0.12
            )
    ax.set_xlabel("training rollouts")
    ax.set_ylabel("held-out pass rate, % (95% interval)")
    ax.legend(fontsize=7)
    return save_figure(fig, Path(path))


def scaling_section(store: Store, run_id: str, out_dir: Path) -> tuple[list[str], Path | None]:
    """The report's section: the table and the plot, when the run's curve was evaluated (bench/scaling.py)."""
    adapters = [a for a in store.adapters(run_id) if a.status == "done" and (a.metrics or {}).get("curve_adapters")]
    if (
        all(a.name == GRPO_TARGET for a in adapters)
        or scale_run_id(run_id, 1) not in {r.id for r in store.list_runs()}
        or not any(store.evaluations(scale_run_id(run_id, 1)))
    ):
        return [], None
    try:
        rows = scaling_rows(store, run_id, run_curve_points(adapters))
    except ScalingError as e:
        return ["## Rollout scaling (pass rate vs training rollouts)", "", str(e), ""], None
    plot = scaling_plot({run_id: rows}, out_dir / "rollout_scaling.png")
    lines = [
        "## Rollout scaling (pass rate vs training rollouts)",
        "",
        "Routed TRACE (every adapter at the same fraction of its training) and GRPO on the target at the fractions 0, ¼, ½, ¾, 1 "
        "of the same training budget, on the held-out split, paired with the base (point 0 is the base itself).",
        "",
        *scaling_table(rows),
        "",
    ]
    for who, name in (("trace", "TRACE"), ("grpo", "GRPO-on-target")):
        rate = per_1000(rows, who)
        if rate is not None:
            lines.append(f"{name}: {rate:+.1f} points per 1,000 training rollouts.")
    return [*lines, "", "![rollout scaling](rollout_scaling.png)", ""], plot


class _AlwaysBase:
    """A 'policy' for evaluation.reuse.copy_episodes that plays every task with the base: copy them all."""

    adapters: dict[str, Any] = {}
    base = None

    async def decide(self, messages: Any) -> None:
        return None


async def evaluate_scaling(ev: Evaluation) -> int:
    """Evaluate every curve point k > 0 of the run (runs `<run>.scale-k`); returns the episodes played."""
    from gapforge.evaluation import reuse
    from gapforge.evaluation.run import EvalPlan, child_run_id

    cfg, ecfg, store, run_id, artifacts = ev.cfg, ev.cfg.evaluation, ev.store, ev.run_id, ev.artifacts
    base_row = await asyncio.to_thread(store.get_evaluation, run_id, "eval:base")
    if base_row is None:
        raise ValueError(
            f"run {run_id}: the base is not evaluated yet (the scaling curve pairs every point with its episodes)"
        )
    adapter_rows = await asyncio.to_thread(store.adapters, run_id)
    names = [c["adapter"] for c in artifacts.capabilities]
    with_grpo = any(a.name == GRPO_TARGET and a.status == "done" for a in adapter_rows)
    points = curve_points(adapter_rows, names, [GRPO_TARGET] if with_grpo else [])  # stopped early: TRACE alone later
    plan = EvalPlan(
        run_id,
        ev.env,
        ev.tasks,
        trials=ecfg.trials,
        family_trials=ecfg.family_trials,
        family_trials_policies=tuple(ecfg.family_trials_policies),
        min_family_episodes=ecfg.min_family_episodes,
    )
    played = 0
    for k, point in enumerate(points):
        if k == 0:  # the fresh adapters: the base itself (module doc)
            continue
        run_k = scale_run_id(run_id, k)
        config = {"parent": run_id, "scaling_point": k, "steps": {n: c["step"] for n, c in point.items()}}
        await asyncio.to_thread(store.create_run, "evaluation", config, run_k, exist_ok=True)
        base_child, base_run = child_run_id(run_k, "base"), base_row.metrics["child_run"]
        copied = {"parent": run_k, "policy": "base", "copied_from": base_run}
        await asyncio.to_thread(store.create_run, "evaluation", copied, base_child, exist_ok=True)
        counts = plan.task_trials("base", ev.families)
        await reuse.copy_episodes(
            store, policy=_AlwaysBase(), env=ev.env, sources={None: base_run}, child=base_child, counts=counts
        )
        art_k = replace(artifacts, adapter_paths={n: Path(point[n]["path"]) for n in names}, damaged={})
        grpo_path = Path(point[GRPO_TARGET]["path"]) if GRPO_TARGET in point else None
        backend = await asyncio.to_thread(
            ev.load_backend,  # type: ignore[arg-type]
            ev.base_dir,
            art_k,
            extra_adapters={GRPO_TARGET: grpo_path} if grpo_path else None,
            max_new_tokens=cfg.policy.max_new_tokens,
            seed=cfg.seed,
        )
        ev.progress(
            f"scaling point {k}/{len(points) - 1}: steps " + ", ".join(f"{n} {c['step']}" for n, c in point.items())
        )
        result = await ev.play(
            run_k,
            artifacts=art_k,
            backend=backend,
            baseline_path=grpo_path,
            tasks=ev.tasks,
            families=ev.families,
            trials=ecfg.trials,
            temperature=cfg.policy.temperature,
            family_trials=ecfg.family_trials,
            family_trials_policies=ecfg.family_trials_policies,
            focus_family=ecfg.focus_family,
            min_family_episodes=ecfg.min_family_episodes,
            on_policy_done=lambda name, k=k: ev.progress(f"scaling point {k}: {name}: played and scored"),
        )
        played += sum(reuse.played(p.metrics) for p in result.policies if p.name != "base")  # base: copied above
    return played


class _RolloutScaling(Comparison):
    """Pass rate against training rollouts (`rollout_scaling` in `evaluation.comparisons`): the curve points evaluated after the run's
    held-out evaluation; the report's table and plot."""

    name, optional = "rollout_scaling", True
    extend_order = 1  # its curve points after the paper's all-tasks pass, whose rows a stopped curve must not cost

    async def extend(self, ev: Evaluation) -> int:
        return await evaluate_scaling(ev)

    def report(
        self, store: Store, run_id: str, out_dir: Path, labels: Mapping[str, str]
    ) -> tuple[list[str], list[Path]]:
        lines, plot = scaling_section(store, run_id, out_dir)
        return lines, [plot] if plot else []


CURVE_COMPARISON = _RolloutScaling()
