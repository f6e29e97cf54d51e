"""Scaling with capabilities (the paper's Fig. 3) from the stored evaluation: the `adapter_subsets` comparison.

Routed TRACE over a subset S of the trained adapters is not played again. The routed policy decides once per
conversation from the task's first user message (agents.router.RoutedPolicy), and when the adapter it chose is not
loaded it answers with its base (evaluation.reuse.answered_by). So "the same router with only S's adapters" plays,
under common random numbers (each episode seeds from its (task, sample)), the full routed policy's stored episode
(task, i) on every task routed to an adapter of S, and the base's stored episode (task, i) on every other task.
`subset_episodes` builds exactly that; every subset is then paired with the base per family
(`stats.paired_by_family`). The router is the one trained over every capability: the rows measure what each adapter
adds under that router, not a router retrained over fewer capabilities.

`scaling_lines` are the lines `gapforge demo` prints for it (after the gate's line, `gate_line`, and oracle routing's,
evaluation.oracle): the subsets' paired differences per family. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.evaluation import stats
from gapforge.evaluation.comparisons import Comparison
from gapforge.evaluation.summary import BASE, ROUTED, pairs

if TYPE_CHECKING:
    from gapforge.store import Store


def subset_episodes(
    routed: stats.Episodes, base: stats.Episodes, choice: Mapping[str, str | None], subset: Sequence[str]
) -> stats.Episodes:
    """{task: {sample: row}} of the routed policy with only `subset`'s adapters: `choice` maps a task to the adapter
    the router chose for it (None: base); a task whose choice is not in `subset` plays the base's episodes."""
    keep = set(subset)
    return {t: dict(routed[t] if choice.get(t) in keep else base[t]) for t in sorted(set(routed) & set(base))}


def _choices(metrics: Mapping[str, Any]) -> dict[str, str | None]:
    return {t: d.get("adapter") or None for t, d in (metrics.get("routing") or {}).items()}


def subsets(adapters: Sequence[str]) -> list[tuple[str, ...]]:
    """Each adapter alone, then all of them (with two adapters: the 1-adapter and the 2-adapter routed TRACE)."""
    singles = [(a,) for a in adapters]
    return singles + ([tuple(adapters)] if len(adapters) > 1 else [])


def scaling(store: Store, run_id: str, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """Routed TRACE over each subset of the adapters the router chose among, paired with the base over all tasks and
    per family; None when base and trace_routed were not both evaluated or nothing was routed."""
    from gapforge.evaluation.oracle import policy_episodes

    evals = {e.name.removeprefix("eval:"): e for e in store.evaluations(run_id) if e.name.startswith("eval:")}
    if BASE not in evals or ROUTED not in evals or "child_run" not in evals[ROUTED].metrics:
        return None
    choice = _choices(evals[ROUTED].metrics)
    router = store.get_evaluation(run_id, "router")
    names = [c["adapter"] for c in (router.metrics.get("capabilities") or [])] if router is not None else []
    adapters = names or sorted({a for a in choice.values() if a})
    if not adapters:
        return None
    env = evals[BASE].metrics["env"]
    split = store.get_split(run_id)
    families = dict(split.families) if split is not None else {}
    base, routed = (policy_episodes(store, evals[p].metrics, env, families) for p in (BASE, ROUTED))
    boot = {"n_boot": n_boot, "seed": seed}
    rows = []
    for s in subsets(adapters):
        eps = subset_episodes(routed, base, choice, s)
        rows.append(
            {
                "adapters": list(s),
                "tasks_routed": sorted(t for t in eps if choice.get(t) in s),
                "all": stats.paired_episodes(eps, base, **boot),
                "by_family": stats.paired_by_family(eps, base, families, **boot),
            }
        )
    return {
        "adapters": adapters,
        "rows": rows,
        "note": "the stored router's decisions with only these adapters loaded (other tasks play the base); paired with the base",
    }


def scaling_lines(m: Mapping[str, Any] | None, families: Sequence[str] | None = None) -> list[str]:
    """One line per subset: its paired difference with the base on all tasks, then on each family (or `families`)."""
    if not m:
        return []
    out = []
    for row in m["rows"]:
        fams = row["by_family"]
        per = "; ".join(f"{f} {pairs(fams[f])}" for f in (families or sorted(fams)) if f in fams)
        out.append(
            f"routed over {len(row['adapters'])} adapter{'s' if len(row['adapters']) > 1 else ''} ({', '.join(row['adapters'])}): "
            f"TRACE − base all tasks {pairs(row['all'])}; {per}"
        )
    return out


def gate_line(router_metrics: Mapping[str, Any] | None) -> list[str]:
    gate = (router_metrics or {}).get("gate")
    if not gate:
        return []
    held = gate["heldout"]
    acc = "–" if held.get("accuracy") is None else f"{held['accuracy']:.0%}"
    served = f"; served gate refit on all {len(gate['examples'])}" if gate.get("settings", {}).get("refit") else ""
    return [
        f"gate: held-out accuracy {acc} on {held['n']} examples (train {gate['train_accuracy']:.0%} on "
        f"{sum(e['split'] == 'train' for e in gate['examples'])}{served}); classes {', '.join(held['labels'])}"
    ]


def scaling_section(store: Store, run_id: str, *, n_boot: int = 1000, seed: int = 0) -> list[str]:
    """The report's markdown section: routed TRACE over each subset of the adapters, paired with the base per family."""
    m = scaling(store, run_id, n_boot=n_boot, seed=seed)
    if not m:
        return []
    families = sorted({f for r in m["rows"] for f in r["by_family"]})
    lines = [
        "## Scaling with capabilities",
        "",
        "Routed TRACE with only some of the adapters loaded: the stored router's decisions, a task routed to an adapter that "
        "is not loaded plays the base (its stored episodes; the others are routed TRACE's own), paired with the base episode "
        "by episode; 95% two-stage bootstrap intervals. The router is the one trained over every capability.",
        "",
        "| adapters | tasks routed to them | all tasks | " + " | ".join(families) + " |",
        "|---|---|---|" + "---|" * len(families),
    ]
    for r in m["rows"]:
        cells = [pairs(r["by_family"][f]) if f in r["by_family"] else "–" for f in families]
        lines.append(
            f"| {', '.join(r['adapters'])} | {len(r['tasks_routed'])} | {pairs(r['all'])} | " + " | ".join(cells) + " |"
        )
    return [*lines, ""]


class _AdapterSubsets(Comparison):
    """Routed TRACE over each adapter alone and over all of them, from the stored episodes (always on)."""

    name = "adapter_subsets"

    def report(
        self, store: Store, run_id: str, out_dir: Path, labels: Mapping[str, str]
    ) -> tuple[list[str], list[Path]]:
        return scaling_section(store, run_id), []

    def lines(self, store: Store, run_id: str, cfg: Any) -> list[str]:
        return scaling_lines(scaling(store, run_id))


SUBSETS_COMPARISON = _AdapterSubsets()
