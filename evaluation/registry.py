"""The registry of comparisons (evaluation.comparisons: the plug-in interface) and the loops over it that the
evaluation, the report and `gapforge demo` run. A comparison's module imports `Comparison` only, never this module,
so the plug-ins import no loop over themselves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.evaluation.comparison import GRPO_COMPARISON
from gapforge.evaluation.comparisons import HINTS_COMPARISON, Comparison
from gapforge.evaluation.gepa_baseline import GEPA_COMPARISON
from gapforge.evaluation.oracle import ORACLE_COMPARISON
from gapforge.evaluation.protocol_report import PROTOCOL_COMPARISON
from gapforge.evaluation.rollout_scaling import CURVE_COMPARISON
from gapforge.evaluation.scaling import SUBSETS_COMPARISON

if TYPE_CHECKING:
    from gapforge.store import Store


def registry() -> tuple[Comparison, ...]:
    """Every comparison, in the order their policies are added, their sections written and their lines printed."""
    return (
        HINTS_COMPARISON,
        GEPA_COMPARISON,
        ORACLE_COMPARISON,
        GRPO_COMPARISON,
        CURVE_COMPARISON,
        PROTOCOL_COMPARISON,
        SUBSETS_COMPARISON,
    )


def enabled(cfg: Any) -> list[Comparison]:
    """The comparisons on in the run's config (`cfg`: a GapforgeConfig)."""
    return [c for c in registry() if c.enabled(cfg.evaluation)]


def comparison_policies(
    base: Any,
    backend: Any,
    capabilities: Sequence[dict[str, str]],
    temperature: float,
    prepared: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every comparison's policies for one evaluation, in registry order."""
    out: dict[str, Any] = {}
    for c in registry():
        out.update(c.policies(base, backend, capabilities, temperature, (prepared or {}).get(c.name)))
    return out


def scored(store: Store, run_id: str, *, scope: str, seed: int) -> None:
    for c in registry():
        c.scored(store, run_id, scope=scope, seed=seed)


def report_sections(store: Store, run_id: str, out_dir: Path) -> tuple[list[str], list[Path]]:
    lines: list[str] = []
    plots: list[Path] = []
    shown = labels(store, run_id)
    for c in registry():
        more, drawn = c.report(store, run_id, out_dir, shown)
        lines += more
        plots += drawn
    return lines, plots


def summary_lines(store: Store, run_id: str, cfg: Any, kind: str) -> list[str]:
    """The printed lines of every comparison of `kind` (cfg: the run's GapforgeConfig, or None: as stored)."""
    return [line for c in registry() if c.kind == kind for line in c.lines(store, run_id, cfg)]


def labels(store: Store, run_id: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in registry():
        out.update(c.labels(store, run_id))
    return out
