"""The `routing:` config section: which adapter, or the base model, answers each task (docs/evaluation.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class GateConfig(BaseModel):
    """routing.backend=gate: the learned gate (agents/router/gate.py; its training constants live there)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    hidden: int = Field(0, ge=0, le=4096, description="0 = logistic regression; N = a 2-layer MLP with N hidden units")
    max_tokens: int = Field(256, ge=1, description="tokens of the first user message pooled")
    refit: bool = Field(True, description="after measuring, fit the served gate again on every example")


class RoutingConfig(BaseModel):
    """The router: which adapter, or the base model, answers each task (docs/evaluation.md)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = Field(True, description="False: every task goes to the base model")
    backend: Literal["transformers", "vllm", "gate"] = Field(
        "transformers",
        description="transformers / vllm: the base's logprob of each label after the routing prompt (a local model / a "
        "vLLM server's completions); gate: a classifier over the base's hidden state (docs/evaluation.md)",
    )
    gate: GateConfig = Field(default_factory=GateConfig)
    labels: list[str] = Field(
        default_factory=lambda: list("ABCDEFGHIJKLMNOP"),
        description="capability i gets labels[i], `none` the next one; each must be one token",
    )
    margin: float = Field(
        0.0,
        ge=0.0,
        description="abstain to the base when top minus runner-up score < margin (logprobs; gate: log-odds)",
    )
    batch_size: int = Field(8, ge=1, description="routing prompts per forward pass")

    @field_validator("labels")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(v) < 2 or len(set(v)) != len(v) or any(not s.strip() for s in v):
            raise ValueError("routing.labels needs at least 2 distinct, non-blank labels")
        return v
