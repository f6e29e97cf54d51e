"""Dollars beside a run's counters: the `pricing:` config section, each stage's and each capability's cost, and the
points per $100 of TRACE and of GRPO on the target.

The counters are the graph state's: `cost` per stage (graph.nodes.call_stage) and `capability_cost` per capability
(its synthesize, validate and train stages: graph.capability). A stage's LLM tokens are priced at the model its
endpoint was called with: the user simulator's (`rollouts.user_endpoint`) for the stages that play the target
(collect_rollouts, train_baseline, evaluate), `llm.endpoint.model` for the others. CPU and GPU seconds are priced per
hour. What each is charged:

- a capability: its own synthesis, validation and training, plus an equal share of the stages its run shared between
  the capabilities it retained (`SHARED`: the target's rollouts, the analysis, the router);
- TRACE: every stage up to the router (the target's collection included: its analysis needs it);
- GRPO on the target: its training stage (`train_baseline`: its rollouts play the target, user simulator included).

The evaluation and the report measure both and are charged to neither. A model with no price in `pricing.tokens`
leaves its tokens unpriced: the lines say which model to add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SHARED = ("collect_rollouts", "discover", "label", "select", "review", "build_router")
PLAYS_TARGET = ("collect_rollouts", "train_baseline", "evaluate")  # their LLM tokens: the user simulator's
TRACE_STAGES = (*SHARED, "synthesize", "validate", "train")
GRPO_STAGES = ("train_baseline",)


class PricingConfig(BaseModel):
    """What a run's resources cost: dollars beside its counters (`gapforge state`, the report, the viewer,
    `gapforge run --estimate`). The defaults are list prices of 2026-12: set your own."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    tokens: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: {"gpt-4o-mini": (0.15, 0.60)},
        description="$ per 1M prompt and per 1M completion tokens, by the model name an endpoint is called with "
        "(llm.endpoint.model; the user simulator's); a model not listed: its tokens are counted, not priced",
    )
    cpu_hour: float = Field(0.05, ge=0.0, description="$ per CPU core-hour (local policy rollouts, CPU training)")
    gpu_hour: float = Field(2.50, ge=0.0, description="$ per GPU-hour (training on a GPU)")

    @field_validator("tokens")
    @classmethod
    def _non_negative(cls, v: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for model, prices in v.items():
            if min(prices) < 0:
                raise ValueError(f"pricing.tokens.{model}: prices are $ per 1M tokens, not negative")
        return v


@dataclass(frozen=True)
class Models:
    """The model names a run's tokens were spent on."""

    llm: str
    user: str
    recorded: bool = False  # llm.kind=scripted: the recordings' token counts, priced as llm.endpoint.model

    @classmethod
    def of(cls, cfg: Any) -> Models:
        user = cfg.policy.endpoint.model if cfg.rollouts.user_endpoint == "policy" else cfg.llm.endpoint.model
        return cls(cfg.llm.endpoint.model, user, cfg.llm.kind == "scripted")


@dataclass
class Dollars:
    """A sum of dollars and the models whose tokens it could not price."""

    value: float = 0.0
    unpriced: frozenset[str] = frozenset()

    def __add__(self, other: Dollars) -> Dollars:
        return Dollars(self.value + other.value, self.unpriced | other.unpriced)

    def scaled(self, factor: float) -> Dollars:
        return Dollars(self.value * factor, self.unpriced)

    def text(self) -> str:
        shown = f"${self.value:,.2f}" if self.value >= 1 or self.value == 0 else f"${self.value:.4f}"
        return shown + ("+?" if self.unpriced else "")


def stage_dollars(stage: str, counters: dict[str, float], pricing: PricingConfig, models: Models) -> Dollars:
    """One stage's counters in dollars."""
    model = models.user if stage in PLAYS_TARGET else models.llm
    value = float(counters.get("cpu_s") or 0) / 3600 * pricing.cpu_hour
    value += float(counters.get("gpu_s") or 0) / 3600 * pricing.gpu_hour
    prompt, completion = float(counters.get("prompt_tokens") or 0), float(counters.get("completion_tokens") or 0)
    if not prompt and not completion:
        return Dollars(value)
    if model not in pricing.tokens:
        return Dollars(value, frozenset({model}))
    per_prompt, per_completion = pricing.tokens[model]
    return Dollars(value + (prompt * per_prompt + completion * per_completion) / 1e6)


def _sum(counters: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in counters:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


@dataclass
class CapabilityCost:
    name: str
    counters: dict[str, float]  # its own stages'
    own: Dollars
    shared: Dollars  # its share of SHARED

    @property
    def total(self) -> Dollars:
        return self.own + self.shared


def capability_costs(values: dict[str, Any], pricing: PricingConfig, models: Models) -> list[CapabilityCost]:
    """Each retained capability's cost (graph state `capability_cost`), with an equal share of the shared stages."""
    own = values.get("capability_cost") or {}
    if not own:
        return []
    stages = values.get("cost") or {}
    shared = Dollars()
    for stage in SHARED:
        if stage in stages:
            shared = shared + stage_dollars(stage, stages[stage], pricing, models)
    # split among the capabilities the run retained (a branch that failed before its first stage has no row, yet shares)
    share = shared.scaled(1 / max(len(values.get("retained") or []), len(own)))
    out = []
    for name, counters in own.items():
        # synthesize, validate and train: their tokens are the LLM roles' (generator, reviewer)
        out.append(CapabilityCost(name, counters, stage_dollars("synthesize", counters, pricing, models), share))
    return out


@dataclass
class Spend:
    """What one way of improving the agent cost: dollars and policy rollouts, and its gain over the base."""

    label: str
    dollars: Dollars
    rollouts: int
    gain_points: float | None  # pass-rate points over the base on the held-out tasks

    def line(self) -> str:
        gain = "no evaluation yet" if self.gain_points is None else f"{self.gain_points:+.1f} points over the base"
        per = ""
        if self.gain_points is not None and self.dollars.unpriced:
            per = " (no points per $100: some of its tokens have no price)"
        elif self.gain_points is not None and self.dollars.value > 0:
            per = f" = {100 * self.gain_points / self.dollars.value:+,.1f} points per $100"
        return f"{self.label}: {self.dollars.text()} and {self.rollouts:,} policy rollouts; {gain}{per}"


def spends(values: dict[str, Any], pricing: PricingConfig, models: Models) -> list[Spend]:
    """TRACE's and (when it was trained) GRPO-on-target's dollars, rollouts and gains."""
    from gapforge.evaluation.summary import BASE, GRPO_TARGET, ROUTED

    stages = values.get("cost") or {}
    evaluation = values.get("evaluation") or {}

    def gain(name: str) -> float | None:
        base, other = (evaluation.get(n, {}).get("pass_rate") for n in (BASE, name))
        return None if base is None or other is None else 100 * (float(other) - float(base))

    def spend(label: str, names: tuple[str, ...], policy: str) -> Spend:
        dollars, rollouts = Dollars(), 0
        for stage in names:
            if stage in stages:
                dollars = dollars + stage_dollars(stage, stages[stage], pricing, models)
                rollouts += int(stages[stage].get("policy_rollouts") or 0)
        return Spend(label, dollars, rollouts, gain(policy))

    out = [spend("TRACE (collection, analysis, synthesis, training, router)", TRACE_STAGES, ROUTED)]
    if "train_baseline" in stages:
        out.append(spend("GRPO on the target (its training)", GRPO_STAGES, GRPO_TARGET))
    return out


def notes(values: dict[str, Any], pricing: PricingConfig, models: Models) -> list[str]:
    """What the dollars above rest on, in a line or two."""
    unpriced: set[str] = set()
    for stage, counters in (values.get("cost") or {}).items():
        unpriced |= stage_dollars(stage, counters, pricing, models).unpriced
    out = [
        f"prices: CPU ${pricing.cpu_hour:g}/core-hour, GPU ${pricing.gpu_hour:g}/hour, tokens "
        + ", ".join(f"{m} ${p:g}/${c:g} per 1M prompt/completion" for m, (p, c) in pricing.tokens.items())
        + " (pricing.*)"
    ]
    if models.recorded:
        out.append(
            f"the LLM roles answered from recordings (llm.kind=scripted): their token counts priced as {models.llm}"
        )
    if unpriced:
        out.append(
            f"+?: no price for {', '.join(sorted(unpriced))}: add it to pricing.tokens ({{model: [prompt, completion]}})"
        )
    return out


def stored_pricing(stored: dict[str, Any]) -> tuple[PricingConfig, Models]:
    """The prices and model names of a run's stored config (the viewer's view of a run); the defaults where it has none
    (a run made before `pricing` existed)."""
    try:
        pricing = PricingConfig.model_validate(stored.get("pricing") or {})
    except ValueError:
        pricing = PricingConfig()
    llm, policy, rollouts = (stored.get(k) or {} for k in ("llm", "policy", "rollouts"))
    llm_model = (llm.get("endpoint") or {}).get("model") or "gpt-4o-mini"
    user = (policy.get("endpoint") or {}).get("model") if rollouts.get("user_endpoint") == "policy" else llm_model
    return pricing, Models(llm_model, user or llm_model, llm.get("kind", "scripted") == "scripted")


@dataclass
class CostView:
    """A run's dollars, assembled once for every place that shows them (`gapforge state`, the report, the viewer)."""

    stages: list[tuple[str, dict[str, float], Dollars]]
    capabilities: list[CapabilityCost]
    lines: list[str]  # the spend lines, then what the prices rest on (none before a stage has finished)


def cost_view(values: dict[str, Any], pricing: PricingConfig, models: Models) -> CostView:
    stages = [(s, c, stage_dollars(s, c, pricing, models)) for s, c in (values.get("cost") or {}).items()]
    lines = [*(s.line() for s in spends(values, pricing, models)), *notes(values, pricing, models)] if stages else []
    return CostView(stages, capability_costs(values, pricing, models), lines)


def cost_section(values: dict[str, Any], pricing: PricingConfig, models: Models) -> list[str]:
    """The report's cost section (markdown): each stage's and each capability's dollars, and the spend lines."""
    view = cost_view(values, pricing, models)
    if not view.stages:
        return []
    lines = [
        "## Cost",
        "",
        "| stage | LLM calls | tokens (prompt + completion) | policy rollouts | CPU s | wall s | $ |",
        "|---|---|---|---|---|---|---|",
    ]
    for stage, c, dollars in view.stages:
        tokens = int((c.get("prompt_tokens") or 0) + (c.get("completion_tokens") or 0))
        lines.append(
            f"| {stage} | {int(c.get('llm_calls') or 0)} | {tokens:,} | {int(c.get('policy_rollouts') or 0):,} | "
            f"{float(c.get('cpu_s') or 0):.0f} | {float(c.get('wall_s') or 0):.0f} | {dollars.text()} |"
        )
    if view.capabilities:
        lines += [
            "",
            "| capability | own $ (synthesis, validation, training) | shared $ | total $ |",
            "|---|---|---|---|",
        ]
        lines += [f"| {r.name} | {r.own.text()} | {r.shared.text()} | {r.total.text()} |" for r in view.capabilities]
    return [*lines, "", *(f"- {line}" for line in view.lines), ""]
