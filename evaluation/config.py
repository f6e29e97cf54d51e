"""The `evaluation` config section (the evaluate stage's own settings; gapforge/config.py composes it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_FAMILY_TRIALS = 512


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    trials: int = Field(2, ge=1, le=64, description="episodes per held-out task and policy (K of pass^k)")
    all_tasks_greedy: bool = Field(
        False,
        description="also play every task (analysis split included) once at temperature 0, the paper's protocol; "
        "stored as `all_tasks:<policy>`",
    )
    family_trials: dict[str, int] = Field(
        default_factory=dict,
        description=f"family -> trials per task (1..{MAX_FAMILY_TRIALS}) for family_trials_policies, instead of `trials`",
    )
    family_trials_policies: list[str] = Field(
        default_factory=lambda: ["base", "trace_routed", "baseline_grpo_target"],
        description="policies that play family_trials and min_family_episodes",
    )
    min_family_episodes: int = Field(
        0,
        ge=0,
        le=MAX_FAMILY_TRIALS,
        description="least paired episodes per family for family_trials_policies (0: off)",
    )
    scaling_curve: bool = Field(
        False,
        description="also evaluate routed TRACE and GRPO-on-target at each training.curve_fractions step "
        "(runs <run>.scale-k; train with training.early_stopping=false)",
    )
    focus_family: str | None = Field(None, description="the family whose base -> TRACE (routed) result is the headline")
    routing_seeds: int = Field(
        4, ge=1, le=256, description="held-out synthetic seeds per capability for the router's accuracy"
    )
    baseline_grpo: bool = Field(
        True,
        description="train and evaluate GRPO on the target with as many training rollouts as all "
        "adapters together (computed in training/budget.py)",
    )
    baseline_gepa: bool = Field(
        False, description="optimise the system prompt with GEPA and evaluate it as policy `gepa`"
    )
    gepa_max_metric_calls: int | None = Field(
        None, ge=1, description="episodes GEPA may play; None: as many as all adapters' training rollouts"
    )
    gepa_minibatch: int = Field(3, ge=1, le=64, description="analysis tasks per GEPA reflection step")

    @field_validator("family_trials")
    @classmethod
    def _family_trials_in_range(cls, value: dict[str, int]) -> dict[str, int]:
        for family, k in value.items():
            if not 1 <= k <= MAX_FAMILY_TRIALS:
                raise ValueError(f"family_trials[{family!r}] = {k}: use 1..{MAX_FAMILY_TRIALS} trials per task")
        return value
