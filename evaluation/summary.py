"""The lines a CLI prints at the end of an evaluation: the focus family's base -> TRACE (routed) result with its
episode-level paired difference and a verdict, a line of its own for every other family where TRACE lost (a regression
outside the focus family), then TRACE − base (and GRPO-on-target − base, when evaluated) on every other family, each
flagged "underpowered" when its 95% interval is wider than ± `UNDERPOWERED_POINTS`. Pure functions over the stored
metrics (`eval:<name>` metrics by evaluation name); nothing here prints.

Verdict: "gain" only when the paired difference's 95% interval is above 0, "loss" when it is below 0, otherwise "no
effect" (the interval contains 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from gapforge.store import Store

BASE, ROUTED, GRPO_TARGET = "base", "trace_routed", "baseline_grpo_target"
UNSEEN = "unseen"  # the scope of the second held-out split (evaluation.unseen_env): rows `unseen:<policy>`


def scope_metrics(store: Store, run_id: str, scope: str = "eval") -> dict[str, Any]:
    """The stored metrics of one split's evaluations `<scope>:<policy>`, by policy name (eval: the held-out split;
    UNSEEN: evaluation.unseen_env)."""
    prefix = f"{scope}:"
    return {e.name.removeprefix(prefix): e.metrics for e in store.evaluations(run_id) if e.name.startswith(prefix)}


UNDERPOWERED_POINTS = 15.0  # a family's paired 95% interval wider than ± this many points is flagged
NO_EFFECT_LINE = "no effect (the 95% interval contains 0)"


def verdict(iv: Mapping[str, Any] | None) -> Literal["gain", "loss", "no effect"] | None:
    """gain (low > 0), loss (high < 0), no effect (the interval contains 0); None without an interval. Decided on the
    ends as printed (`points`: one decimal of a point), so "[+0.0, +14.2]" never reads as a gain."""
    if not iv or iv.get("low") is None or iv.get("high") is None:
        return None
    if round(iv["low"] * 100, 1) > 0:
        return "gain"
    if round(iv["high"] * 100, 1) < 0:
        return "loss"
    return "no effect"


def points(iv: Mapping[str, Any]) -> str:
    """A difference in pass rate as signed points with its interval: '+12.5 points [+3.1, +21.9]'."""
    return f"{iv['value'] * 100:+.1f} points [{iv['low'] * 100:+.1f}, {iv['high'] * 100:+.1f}]"


def pairs(d: Mapping[str, Any]) -> str:
    """A paired difference in pass rate with its pair count: '+12.5 points [+3.1, +21.9] (40 pairs)'."""
    pr = d.get("pass_rate") or {}
    return "no paired episodes" if pr.get("value") is None else f"{points(pr)} ({d.get('episodes', 0)} pairs)"


def interval(iv: Mapping[str, Any] | None, pct: bool = True) -> str:
    """A value with its interval for a table: '35.0% [25.0, 45.0]' (pct) or '0.4 [0.2, 0.5]'; '–' without one."""
    if not iv or iv.get("value") is None:
        return "–"
    scale, unit = (100.0, "%") if pct else (1.0, "")
    return f"{iv['value'] * scale:.1f}{unit} [{iv['low'] * scale:.1f}, {iv['high'] * scale:.1f}]"


def signed(iv: Mapping[str, Any] | None, *, pct: bool) -> str:
    """A difference with its interval for a table: points (pct) or a signed reward; '–' without one."""
    if not iv or iv.get("value") is None:
        return "–"
    return points(iv) if pct else f"{iv['value']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]"


def _rate(m: Mapping[str, Any] | None) -> str:
    pr = (m or {}).get("pass_rate") or {}
    if pr.get("value") is None:
        return "– (0 episodes)"
    return f"{pr['value']:.1%} ({m.get('episodes', 0)} episodes)"  # type: ignore[union-attr]


def _diff(d: Mapping[str, Any] | None) -> str:
    pr = (d or {}).get("pass_rate") or {}
    if pr.get("value") is None:
        return "no paired episodes"
    return f"{points(pr)}, {d.get('episodes', 0)} paired episodes"  # type: ignore[union-attr]


def half_width(iv: Mapping[str, Any] | None) -> float | None:
    """Half the width of an interval, in points (None without one)."""
    if not iv or iv.get("low") is None or iv.get("high") is None:
        return None
    return 100 * (iv["high"] - iv["low"]) / 2


def underpowered(d: Mapping[str, Any] | None, limit_points: float = UNDERPOWERED_POINTS) -> str:
    """' — underpowered (±N points)' when the paired difference's interval is wider than ± limit_points, else ''."""
    hw = half_width((d or {}).get("pass_rate"))
    return f" — underpowered (±{hw:.0f} points > ±{limit_points:.0f})" if hw is not None and hw > limit_points else ""


def headline(metrics_by_name: Mapping[str, Mapping[str, Any]], focus_family: str | None = None) -> list[str]:
    """The summary lines. `metrics_by_name`: evaluation name ("base", "trace_routed", ...) -> its stored metrics
    (EvaluationResult.policies' metrics, or store evaluations `eval:<name>` without the prefix). `focus_family` None:
    the one stored with the metrics, else the headline is over all tasks."""
    base, routed = metrics_by_name.get(BASE), metrics_by_name.get(ROUTED)
    if base is None or routed is None:
        return ["no summary: base and trace_routed were not both evaluated"]
    focus = focus_family if focus_family is not None else routed.get("focus_family")
    by_family = routed.get("vs_base_by_family") or {}
    if focus is None:
        scope, b, t, d = "all tasks", base, routed, routed.get("vs_base_paired")
    elif focus in (routed.get("by_family") or {}):
        scope, b = focus, (base.get("by_family") or {}).get(focus)
        t, d = routed["by_family"][focus], by_family.get(focus)
    else:
        known = ", ".join(sorted(routed.get("by_family") or {})) or "none"
        return [f"focus family {focus!r} was not evaluated (families: {known})"]
    word = verdict((d or {}).get("pass_rate"))
    lines = [
        f"{scope}: base {_rate(b)} -> TRACE (routed) {_rate(t)}",
        f"{scope}: TRACE − base {_diff(d)}: {NO_EFFECT_LINE if word == 'no effect' else word or 'no verdict'}{underpowered(d)}",
    ]
    others = sorted(f for f in by_family if f != focus)
    outside = f"outside {focus}" if focus is not None else "in a family"
    lines += [
        f"regression {outside}: {family}: TRACE − base {_diff(by_family[family])}: loss"
        for family in others
        if verdict((by_family[family] or {}).get("pass_rate")) == "loss"
    ]
    grpo = (metrics_by_name.get(GRPO_TARGET) or {}).get("vs_base_by_family")
    for family in others:
        line = f"{family}: TRACE − base {_diff(by_family[family])}{underpowered(by_family[family])}"
        if grpo is not None and family in grpo:
            line += f"; GRPO-on-target − base {_diff(grpo[family])}{underpowered(grpo[family])}"
        lines.append(line)
    return lines


def figure(size: tuple[float, float]) -> tuple[Any, Any]:
    """A matplotlib figure and its axes, drawn off screen (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size)


def save_figure(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # long tick labels widen the image instead of being cut off
    plt.close(fig)
    return path
