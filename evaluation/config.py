"""The `evaluation` config section (the evaluate stage's own settings; gapforge/config.py composes it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_FAMILY_TRIALS = 512


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    trials: int = Field(2, ge=1, le=64, description="episodes per held-out task and evaluated policy (K for pass^k)")
    all_tasks_greedy: bool = Field(
        False, description="also evaluate every policy on every task of the run (the analysis split included, so not held out) at "
        "temperature 0 with 1 trial per task: the TRACE paper's protocol, stored as `all_tasks:<policy>` and reported beside the held-out split")
    family_trials: dict[str, int] = Field(
        default_factory=dict,
        description=f"family -> trials per task of that family (1..{MAX_FAMILY_TRIALS}), instead of `trials`, "
        "for the policies in family_trials_policies (more paired episodes where the headline is measured)",
    )
    family_trials_policies: list[str] = Field(
        default_factory=lambda: ["base", "trace_routed", "baseline_grpo_target"],
        description="evaluation names that play family_trials and min_family_episodes; every other policy plays `trials` on every task",
    )
    min_family_episodes: int = Field(
        0, ge=0, le=MAX_FAMILY_TRIALS, description="at least this many paired episodes per family for the family_trials_policies: "
        "trials per task of a family = ceil(this / its held-out tasks), unless family_trials gives more (0: off)")
    scaling_curve: bool = Field(False, description="after the evaluation, also evaluate routed TRACE and GRPO-on-target at every kept fraction "
                                "of their training (training.curve_fractions; train with training.early_stopping=false), runs <run>.scale-k")
    underpowered_points: float = Field(
        15.0, gt=0, description="a family whose paired interval is wider than ± this many points is flagged underpowered")
    focus_family: str | None = Field(None, description="the family whose base -> TRACE (routed) result is the headline (report, summary)")
    routing_seeds: int = Field(4, ge=1, le=256, description="held-out synthetic seeds per capability for the router's accuracy")
    baseline_grpo: bool = Field(True, description="train the GRPO-on-target baseline (training.budget: the training rollouts of all "
                                "capability adapters together) before evaluating")
    baseline_gepa: bool = Field(False, description="optimise the system prompt with GEPA on the analysis split (evaluation/gepa_baseline.py) "
                                "and evaluate it as the policy `gepa`; the reflection LM is the `llm` role")
    gepa_max_metric_calls: int | None = Field(None, ge=1, description="episodes GEPA may play (its metric calls); "
                                              "default: TRACE's training rollouts, training.budget.training_rollout_budget")
    gepa_minibatch: int = Field(3, ge=1, le=64, description="analysis tasks per GEPA reflection step (reflection_minibatch_size)")

    @field_validator("family_trials")
    @classmethod
    def _family_trials_in_range(cls, value: dict[str, int]) -> dict[str, int]:
        for family, k in value.items():
            if not 1 <= k <= MAX_FAMILY_TRIALS:
                raise ValueError(f"family_trials[{family!r}] = {k}: use 1..{MAX_FAMILY_TRIALS} trials per task")
        return value
