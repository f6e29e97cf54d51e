"""SynthesisConfig: the `synthesis` section of the config tree (gapforge/config.py imports it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

EPISODES_IN_PROMPT = 3  # LACKING failed episodes shown to the generator (agents/synthesis/context.py)
EPISODE_CHARS = 2500  # characters per compacted episode in the generator's prompt


class SynthesisConfig(BaseModel):
    """Environment synthesis: the generator writes an env per retained capability; the validation (static gate, self-test
    in the sandbox, LLM review, GRPO readiness) judges each attempt and sends what failed back to the generator."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    max_attempts: int = Field(5, ge=1, description="generator attempts per capability")
    validation_seeds: int = Field(20, ge=2, description="seeds per self-test check")
    review: bool = Field(
        True, description="LLM code review (check llm_review) of each attempt that passes the static gate"
    )
    rollout_budget: int = Field(
        400, ge=0, description="GRPO-readiness policy rollouts per capability, over all attempts"
    )
    recordings: str | None = Field(
        None,
        description="recorded generator and reviewer answers (YAML) for llm.kind scripted; None: the demo's shop recordings",
    )
