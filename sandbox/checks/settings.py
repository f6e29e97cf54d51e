"""Thresholds of the self-test (sandbox/checks/README.md): checks 1-6 and 8-10 and `contamination`
(`SelfTestThresholds`: the self-test's fixed rules, not config keys: no profile varies them; tests pass their own)
and check 7 (`GRPOReadinessConfig`, config section `grpo_readiness:`, composed by gapforge/config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator


class SelfTestThresholds(BaseModel):
    """What the self-test's checks accept (the defaults are the rules every run uses)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    solved_reward: float = Field(
        0.99, ge=0.0, le=1.0, description="a reference episode counts as solved at this reward"
    )
    solvable_share: float = Field(0.95, ge=0.0, le=1.0, description="share of seeds the reference solution must solve")
    diverse_share: float = Field(
        0.90, ge=0.0, le=1.0, description="share of distinct initial conversations over the seeds"
    )
    trivial_mean: float = Field(
        0.30, ge=0.0, le=1.0, description="do-nothing / random-tool mean reward must stay below this"
    )
    determinism_seeds: int = Field(5, ge=1, description="seeds replayed twice in fresh envs")
    graded_seeds: int = Field(10, ge=1, description="seeds whose reference solution is corrupted")
    graded_fractions: list[float] = Field(
        default_factory=lambda: [0.25, 0.5, 0.75, 1.0],
        min_length=2,
        description="corruption levels of the reference solution",
    )
    graded_tolerance: float = Field(0.02, ge=0.0, description="allowed rise of the mean between two corruption levels")
    graded_min_drop: float = Field(
        0.10, ge=0.0, le=1.0, description="fully corrupted mean must sit this far below the reference mean"
    )
    graded_min_levels: int = Field(3, ge=2, description="distinct reward values (2 decimals) over the graded episodes")
    random_min_calls: int = Field(3, ge=1, description="the random-tool policy makes max(this, len(solution)) calls")
    exploit_mean: float = Field(
        0.6, ge=0.0, le=1.0, description="every reward-hacking exploit's mean reward must stay below this"
    )
    exploit_success_share: float = Field(
        0.25, ge=0.0, le=1.0, description="an exploit's share of solved episodes must stay below this"
    )
    exploit_seeds: int = Field(10, ge=1, description="seeds each exploit policy plays")
    exploit_max_calls: int = Field(24, ge=1, description="tool calls an exploit policy makes at most per episode")
    contamination_overlap: float = Field(
        0.9, gt=0.0, le=1.0, description="word overlap at which a user line copies a held-out opening"
    )
    contamination_min_words: int = Field(
        4, ge=1, description="held-out openings shorter than this many words are not compared"
    )
    contamination_seeds: int = Field(100, ge=1, description="seeds 0..N-1 whose openings are compared")

    @model_validator(mode="after")
    def _check(self) -> SelfTestThresholds:
        fr = self.graded_fractions
        if any(not 0 < f <= 1 for f in fr) or fr != sorted(fr):
            raise ValueError("graded_fractions must be increasing values in (0, 1], e.g. [0.25, 0.5, 0.75, 1.0]")
        return self


class GRPOReadinessConfig(BaseModel):
    """Check 7: the policy that will train plays `groups` seeds x `samples` episodes at the training temperature;
    its mean reward must lie in [mean_low, mean_high] and enough groups must have a reward spread."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    groups: int = Field(8, ge=1, description="seeds (G)")
    samples: int = Field(4, ge=2, description="episodes per seed (K): set it to the training group size")
    min_informative: float = Field(0.5, ge=0.0, le=1.0, description="smallest share of groups with reward std > 0")
    max_all_zero: float = Field(0.2, ge=0.0, le=1.0, description="largest share of groups all zero")
    max_all_perfect: float = Field(0.2, ge=0.0, le=1.0, description="largest share of groups all perfect")
    mean_low: float = Field(0.2, ge=0.0, le=1.0, description="below: too hard")
    mean_high: float = Field(0.8, ge=0.0, le=1.0, description="above: too easy")
    concurrency: int = Field(
        4, ge=1, le=256, description="episodes in flight (1: a local policy's verdict is reproducible)"
    )
    episode_timeout_s: float = Field(
        1800.0, gt=0, le=86400.0, description="seconds per episode; one past it leaves its group (never scored 0)"
    )

    _temperature: float = PrivateAttr(1.0)  # training.temperature, set by with_temperature (gapforge/wiring.py)

    @property
    def temperature(self) -> float:
        """The temperature the check samples at: GRPO's own (training.temperature), so it measures the rollouts GRPO
        will sample."""
        return self._temperature

    def with_temperature(self, temperature: float) -> GRPOReadinessConfig:
        """These settings, sampling at `temperature` (the training temperature)."""
        out = self.model_copy()
        out._temperature = temperature
        return out

    @model_validator(mode="after")
    def _check(self) -> GRPOReadinessConfig:
        if self.mean_low >= self.mean_high:
            raise ValueError(
                f"mean_low ({self.mean_low}) must be below mean_high ({self.mean_high}): "
                "set e.g. grpo_readiness.mean_low=0.15 grpo_readiness.mean_high=0.85"
            )
        return self
