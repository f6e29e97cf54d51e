"""TrainingConfig: GRPO + LoRA per capability (docs/training.md).

Defaults are the paper's (TRACE, arXiv 2604.05336 §4): LoRA rank 32 on every
projection, AdamW lr 1e-5, temperature 1.0, up to 40 iterations, ~640 rollouts
per adapter (40 steps x 2 groups x K=8). `TrainingConfig.tiny()` is the CPU /
tiny-model profile the tests, the demo and the done-when experiment use.
This module imports nothing of ours; gapforge/config.py re-exports it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The recipe's fixed parts (the paper's; no profile varies them), read by training/grpo.py:
ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # modules LoRA adapts
LORA_DROPOUT = 0.0  # no dropout on the adapters
CLIP_EPSILON = 0.2  # PPO-style clip range of the GRPO loss
LOSS_TYPE = "dapo"  # TRL GRPOConfig.loss_type (training/grpo.py relies on its zero-advantage behaviour)


class TrainingConfig(BaseModel):
    """One capability's GRPO + LoRA run (docs/training.md); the GRPO-on-target baseline uses the same settings."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # LoRA (kept plain: vLLM rejects DoRA, biases and modules_to_save)
    lora_rank: int = Field(32, ge=1, description="LoRA rank (paper: 32; on every projection, ALL_PROJECTIONS)")
    lora_alpha: int = Field(64, ge=1)
    # optimisation
    learning_rate: float = Field(1e-5, gt=0, description="AdamW learning rate (paper: 1e-5)")
    max_steps: int = Field(40, ge=1, description="optimizer steps (paper: up to 40)")
    groups_per_step: int = Field(2, ge=1, description="seeds (GRPO groups) per optimizer step")
    num_generations: int = Field(8, ge=2, description="K: rollouts per seed (the GRPO group)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature (paper: 1.0)")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient (0: no reference model)")
    # rollouts
    max_turns: int = Field(12, ge=1, description="assistant turns per rollout")
    malformed_tool_calls: Literal["end", "continue"] = Field(
        "end", description="an unparsable tool call ends the rollout (end) or goes to the env as text (continue)"
    )
    max_new_tokens: int = Field(256, ge=8, description="tokens per assistant turn")
    max_completion_length: int = Field(
        2048, ge=16, description="all completion tokens of a rollout (model + env turns)"
    )
    env_timeout_s: float = Field(
        30.0,
        gt=0,
        description="seconds per env call; a slower call ends the rollout, which leaves the loss (never scored 0)",
    )
    # seeds and selection
    train_seeds: int = Field(80, ge=1, description="synthetic seeds 0..train_seeds-1")
    heldout_seeds: int = Field(
        16, ge=1, description="seeds after the training ones, for checkpoint selection and early stop"
    )
    heldout_samples: int = Field(2, ge=1, description="rollouts per held-out seed")
    eval_every: int = Field(5, ge=1, description="held-out evaluation every N steps")
    patience: int = Field(3, ge=1, description="stop after this many evaluations without improvement")
    min_improvement: float = Field(0.01, ge=0.0, description="held-out reward gain that counts as an improvement")
    early_stopping: bool = Field(
        True, description="stop after `patience` evaluations without improvement; false: train to max_steps"
    )
    curve_fractions: list[float] = Field(
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0],
        description="also keep the adapter at step round(f x max_steps) for each f (curve/step-N)",
    )
    save_every: int = Field(5, ge=1, description="TRL checkpoint every N steps (resume point)")
    # generation backend
    generation: Literal["transformers", "vllm_server", "vllm_colocate"] = Field(
        "transformers", description="transformers: in-process (CPU, tests); vllm_*: TRL's vLLM support (GPU)"
    )
    vllm_server_base_url: str | None = Field(None, description="for generation=vllm_server, e.g. http://localhost:8000")
    loss_forward: Literal["auto", "batched", "rows"] = Field(
        "auto",
        description="the loss's forward pass: batched (one padded batch) or rows (one rollout at a time, no padding); "
        "auto: rows on CPU, batched on a GPU",
    )
    report_to: list[Literal["tensorboard", "wandb", "trackio"]] = Field(
        default_factory=list,
        description="trackers (when installed) for each adapter's training and the evaluation's summary, grouped by run id",
    )
    seed: int = 0

    @field_validator("report_to", mode="before")
    @classmethod
    def _no_none(cls, value: Any) -> Any:
        """TRL's `none` (as `[]`) is no tracker."""
        return [v for v in value if v != "none"] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        if self.generation == "vllm_server" and not self.vllm_server_base_url:
            raise ValueError("generation=vllm_server needs vllm_server_base_url (e.g. http://localhost:8000)")
        if any(not 0.0 <= f <= 1.0 for f in self.curve_fractions):
            raise ValueError(f"curve_fractions {self.curve_fractions}: each fraction of max_steps must lie in [0, 1]")
        if self.max_new_tokens > self.max_completion_length:
            raise ValueError(
                f"max_new_tokens ({self.max_new_tokens}) must be <= max_completion_length ({self.max_completion_length})"
            )
        return self

    @property
    def rollouts_per_step(self) -> int:
        return self.groups_per_step * self.num_generations

    def train_seed_list(self) -> list[int]:
        return list(range(self.train_seeds))

    def curve_steps(self) -> list[int]:
        """The steps whose adapter is kept for the scaling curve: round(f * max_steps), ascending, once each."""
        return sorted({round(f * self.max_steps) for f in self.curve_fractions})

    def heldout_seed_list(self) -> list[int]:
        """Disjoint from the training seeds by construction."""
        return list(range(self.train_seeds, self.train_seeds + self.heldout_seeds))

    @classmethod
    def tiny(cls, **overrides: object) -> TrainingConfig:
        """CPU profile for the taught tiny model: small groups, short turns, higher lr."""
        base: dict[str, object] = dict(
            lora_rank=8,
            lora_alpha=16,
            learning_rate=2e-3,
            max_steps=20,
            groups_per_step=2,
            num_generations=4,
            max_turns=8,
            malformed_tool_calls="continue",
            max_new_tokens=64,
            max_completion_length=1536,
            train_seeds=64,
            heldout_seeds=16,
            heldout_samples=2,
            eval_every=5,
            patience=3,
            save_every=5,
        )
        base.update(overrides)
        return cls(**base)
