"""The `evaluation` config section (the evaluate stage's own settings; gapforge/config.py composes it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_FAMILY_TRIALS = 512
# The comparison plug-ins a run makes only when `evaluation.comparisons` names them (their `name`; the registry's
# others are always on: tests/gapforge/test_config.py checks the two agree).
OptionalComparison = Literal["baseline_grpo_target", "gepa", "rollout_scaling", "paper_protocol"]


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    trials: int = Field(2, ge=1, le=64, description="episodes per held-out task and policy (K of pass^k)")
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
    focus_family: str | None = Field(None, description="the family whose base -> TRACE (routed) result is the headline")
    routing_seeds: int = Field(
        4, ge=1, le=256, description="held-out synthetic seeds per capability for the router's accuracy"
    )
    comparisons: list[OptionalComparison] = Field(
        default_factory=lambda: ["baseline_grpo_target"],
        description="the optional comparisons (evaluation/registry.py) a run makes besides the capability hints, oracle "
        "routing and adapter subsets: baseline_grpo_target (train GRPO on the target with as many training rollouts as "
        "all adapters together, training/budget.py), gepa (optimise the system prompt with GEPA, extra `gepa`), "
        "rollout_scaling (evaluate routed TRACE and GRPO-on-target at each training.curve_fractions step, runs "
        "<run>.scale-k; train with training.early_stopping=false), paper_protocol (also play every task, analysis split "
        "included, once at temperature 0: `all_tasks:<policy>`)",
    )
    gepa_max_metric_calls: int | None = Field(
        None, ge=1, description="episodes GEPA may play; None: as many as all adapters' training rollouts"
    )
    unseen_env: str | None = Field(
        None,
        description="a second held-out split on records the analysis never saw: every task of this target spec (e.g. "
        "shop?instances=61-70 beside rollouts.env=shop?instances=0,51-60), played by every policy as the held-out "
        "split is and reported beside it (`unseen:<policy>`); its task ids must not be rollouts.env's",
    )

    @field_validator("family_trials")
    @classmethod
    def _family_trials_in_range(cls, value: dict[str, int]) -> dict[str, int]:
        for family, k in value.items():
            if not 1 <= k <= MAX_FAMILY_TRIALS:
                raise ValueError(f"family_trials[{family!r}] = {k}: use 1..{MAX_FAMILY_TRIALS} trials per task")
        return value
