"""AnalysisConfig: the `analysis:` section. Defaults follow the paper's reference settings (δ = 0.20, ρ = 0.10, K of
R = 80%), except R = 3 passes (the paper uses 10: raise `passes` when the analyst is a real model and budget allows).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AnalysisConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    delta: float = Field(0.20, ge=-1.0, le=1.0, description="minimum gap ER- - ER+ for a pass to keep a capability")
    rho: float = Field(0.10, ge=0.0, le=1.0, description="minimum coverage (LACKING failures / failures)")
    passes: int = Field(3, ge=1, le=100, description="labeling passes R (paper: 10)")
    min_passes: int | None = Field(
        None, ge=1, description="K: passes (of R) a capability must be kept in; None: ceil(0.8 R)"
    )
    max_retained: int | None = Field(
        None, ge=1, description="retain at most N capabilities, largest gap first (the rest: 'deferred'); None: all"
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="capabilities never retained (verdict 'excluded', not counted in max_retained); their statistics are kept",
    )
    min_capabilities: int = Field(4, ge=1, description="fewest capabilities discovery may propose")
    max_capabilities: int = Field(10, ge=1, description="most capabilities discovery may propose")
    discovery_failed: int = Field(20, ge=1, description="failed episodes shown to discovery (at most)")
    discovery_success: int = Field(5, ge=0, description="successful episodes shown to discovery (at most)")
    discovery_budget_tokens: int = Field(24_000, ge=1_000, description="tokens of episodes in the discovery prompt")
    concurrency: int = Field(16, ge=1, le=1024, description="labeling calls in flight")
    lean_http: bool = Field(True, description="an endpoint analyst labels over plain HTTP; false: via LangChain")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="analyst temperature in labeling passes")
    seed: int = Field(0, description="seeds sampling, labeling passes, the split and the bootstrap")
    split_fraction: float = Field(0.5, gt=0.0, le=1.0, description="share of each family's tasks in the analysis split")
    bootstrap: int = Field(1000, ge=0, le=100_000, description="bootstrap resamples over tasks (0: no intervals)")
    tokenizer: str = Field(
        "auto",
        description="token counting: auto | tiktoken:ENCODING | PATH (tokenizer.json or HF model dir) | bytes (estimate)",
    )

    @property
    def required_passes(self) -> int:
        """K: the number of passes (of R) in which a capability must be kept to be retained."""
        return self.min_passes if self.min_passes is not None else max(1, math.ceil(0.8 * self.passes))

    @model_validator(mode="after")
    def _check(self) -> "AnalysisConfig":
        if self.min_passes is not None and self.min_passes > self.passes:
            raise ValueError(
                f"min_passes ({self.min_passes}) must be <= passes ({self.passes}): lower min_passes or raise passes"
            )
        if self.min_capabilities > self.max_capabilities:
            raise ValueError(
                f"min_capabilities ({self.min_capabilities}) must be <= max_capabilities ({self.max_capabilities})"
            )
        return self
