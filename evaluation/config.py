"""The `evaluation` config section (the evaluate stage's own settings; gapforge/config.py composes it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    trials: int = Field(2, ge=1, le=64, description="episodes per held-out task and evaluated policy (K for pass^k)")
    routing_seeds: int = Field(4, ge=1, le=256, description="held-out synthetic seeds per capability for the router's accuracy")
    baseline_grpo: bool = Field(True, description="train the GRPO-on-target baseline (the adapters' rollout budget) before evaluating")
