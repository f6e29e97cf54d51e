"""TRL GRPOTrainer + PEFT LoRA wired to our multi-turn rollouts.

Why `rollout_func` and not `environment_factory` (TRL 1.16): environment_factory turns an env's public methods into
tools and ends a rollout at the model's first text turn, so a simulated user can never answer, and TRL pools its env
instances and never closes them. `rollout_func(prompts, trainer)` is called with or without vLLM and returns exactly
the sampled token ids, the sampler's logprobs and an `env_mask` (0 on env tokens, TRL's tool_mask), while the env
(tool results and user replies alike) answers through `env.step`.

Each dataset row's prompt is the task reference as JSON (a synthetic seed or a target task id); TRL's RepeatSampler
hands each row K times in a row, so one run of equal prompts is one GRPO group played from the identical initial
state. A rollout an env or infrastructure fault ended (`TokenRollout.dropped`) is not data about the model: its tokens
are masked (training/rollout.py) and TRL gets its group's healthy mean reward (0 when none), so it moves neither the
group's mean nor any advantage; the step log counts them (`dropped_env`, `dropped_infra`) and its reward / informative
share are over the healthy rollouts only.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from gapforge.training.config import ALL_PROJECTIONS, CLIP_EPSILON, LORA_DROPOUT, LOSS_TYPE, TrainingConfig
from gapforge.training.cpu import cuda_available
from gapforge.training.rollout import EnvFactory, TokenRollout, run_groups, settings
from gapforge.training.sampler import Sampler, TransformersSampler, VLLMSampler


def grpo_config(
    cfg: TrainingConfig, output_dir: str, tracking: tuple[list[str], dict[str, Any]] | None = None
):  # -> trl.GRPOConfig
    """The GRPOConfig a TrainingConfig produces (tested down to this on machines without a GPU). `tracking`: TRL's
    report_to and the run's name / project (training.tracking.trainer_tracking); None: cfg.report_to as it is."""
    from trl import GRPOConfig

    report_to, track_args = tracking if tracking is not None else (list(cfg.report_to), {})

    batch = cfg.rollouts_per_step
    extra: dict[str, Any] = {}
    if cfg.generation != "transformers":
        extra = dict(use_vllm=True, vllm_mode="server" if cfg.generation == "vllm_server" else "colocate")
        if cfg.generation == "vllm_server":
            extra["vllm_server_base_url"] = cfg.vllm_server_base_url
    return GRPOConfig(
        output_dir=output_dir,
        learning_rate=cfg.learning_rate,
        max_steps=cfg.max_steps,
        seed=cfg.seed,
        per_device_train_batch_size=batch,
        generation_batch_size=batch,
        gradient_accumulation_steps=1,
        num_iterations=1,
        num_generations=cfg.num_generations,
        temperature=cfg.temperature,
        top_p=1.0,
        top_k=0,
        max_completion_length=cfg.max_completion_length,
        beta=cfg.beta,
        epsilon=CLIP_EPSILON,
        loss_type=LOSS_TYPE,
        mask_truncated_completions=False,
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_every,
        save_total_limit=2,
        report_to=report_to or "none",
        use_cpu=cfg.generation == "transformers" and not cuda_available(),
        bf16=False,
        remove_unused_columns=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        activation_checkpointing=cfg.generation != "transformers",
        **track_args,
        **extra,
    )  # transformers 5's name (the old one warns)


@dataclass
class StepLog:
    """What the rollout function saw at one generation (read by the progress callback)."""

    step: int
    reward: float
    informative_share: float  # groups whose rewards are not all equal (the others carry no signal)
    failures: list[str]
    gen_s: float
    env_s: float
    wall_s: float
    rollouts: int
    malformed_turns: int = 0  # unparsable tool calls passed on as text (malformed_tool_calls="continue")
    dropped_env: int = 0  # rollouts an env fault ended: masked out of the loss
    dropped_infra: int = 0  # rollouts the infrastructure ended (sandbox lost): masked out of the loss


@dataclass
class RolloutRecorder:
    steps: list[StepLog] = field(default_factory=list)
    last: list[TokenRollout] = field(default_factory=list)


def groups_of(prompts: list[Any]) -> list[tuple[Any, int]]:
    """Consecutive runs of equal prompts -> [(prompt, count)]."""
    out: list[tuple[Any, int]] = []
    for p in prompts:
        if out and out[-1][0] == p:
            out[-1] = (p, out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def informative_share(rewards_by_group: list[list[float]]) -> float:
    groups = [g for g in rewards_by_group if g]
    if not groups:
        return 0.0
    return sum(1 for g in groups if max(g) - min(g) > 1e-9) / len(groups)


def trained_rewards(group: list[TokenRollout]) -> list[float]:
    """The rewards TRL sees for one group: a dropped rollout gets the healthy rollouts' mean (0 when none), so it
    shifts neither the group mean nor any advantage (its tokens are masked anyway)."""
    healthy = [r.reward for r in group if r.dropped is None]
    fill = sum(healthy) / len(healthy) if healthy else 0.0
    return [fill if r.dropped is not None else r.reward for r in group]


def make_rollout_func(
    make_env: EnvFactory, cfg: TrainingConfig, tokenizer: Any, recorder: RolloutRecorder, sampler_factory: Any = None
):
    """The `rollout_func(prompts, trainer)` TRL calls at every generation. `sampler_factory(trainer)` overrides the
    sampler (tests wrap the real one to record what it sampled)."""

    def sampler_for(trainer: Any) -> Sampler:
        if sampler_factory is not None:
            return sampler_factory(trainer)
        if getattr(trainer, "use_vllm", False):
            return VLLMSampler(trainer.vllm_generation, {tokenizer.eos_token_id})
        model = trainer.accelerator.unwrap_model(trainer.model)
        return TransformersSampler(model, tokenizer, seed=cfg.seed * 7919 + trainer.state.global_step)

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        t0 = time.perf_counter()
        sampler = sampler_for(trainer)
        groups = [(json.loads(p) if isinstance(p, str) else p, count) for p, count in groups_of(prompts)]
        played = run_groups(make_env, groups, sampler=sampler, tokenizer=tokenizer, **settings(cfg))  # one batch
        rollouts: list[TokenRollout] = [r for group in played for r in group]
        by_group = [[r.reward for r in group if r.dropped is None] for group in played]
        rewards = [reward for group in played for reward in trained_rewards(group)]
        recorder.last = rollouts
        healthy = [r.reward for r in rollouts if r.dropped is None]
        recorder.steps.append(
            StepLog(
                step=trainer.state.global_step + 1,
                reward=sum(healthy) / max(1, len(healthy)),
                informative_share=informative_share(by_group),
                failures=[r.failure for r in rollouts if r.failure],
                gen_s=sum(r.gen_s for r in rollouts),
                env_s=sum(r.env_s for r in rollouts),
                wall_s=time.perf_counter() - t0,
                rollouts=len(rollouts),
                malformed_turns=sum(r.malformed_turns for r in rollouts),
                dropped_env=sum(1 for r in rollouts if r.dropped == "env"),
                dropped_infra=sum(1 for r in rollouts if r.dropped == "infra"),
            )
        )
        return {
            "prompt_ids": [r.traj.prompt_ids for r in rollouts],
            "completion_ids": [r.traj.completion_ids for r in rollouts],
            "logprobs": [r.traj.logprobs for r in rollouts],
            "env_mask": [r.traj.env_mask for r in rollouts],
            "env_reward": rewards,
        }

    return rollout_func


def env_reward(completions: list[Any], env_reward: list[float], **_: Any) -> list[float]:
    """The env's own score of each rollout (forwarded by rollout_func)."""
    return [float(r) for r in env_reward]


def rows_forward(cfg: TrainingConfig) -> bool:
    """Whether the loss's forward runs rollout by rollout (TrainingConfig.loss_forward; auto = on CPU)."""
    if cfg.loss_forward == "auto":
        return cfg.generation == "transformers" and not cuda_available()
    return cfg.loss_forward == "rows"


EXACT_AT_ZERO_ADVANTAGE = ("grpo", "bnpo", "dr_grpo", "dapo")  # TRL losses whose per-token loss is -min(r·A, clip(r)·A)


def zero_advantage_exact(trainer: Any) -> bool:
    """Whether a step whose every advantage is 0 has a loss of exactly 0 and gradients of exactly 0 as configured: one
    of the clipped-ratio losses, no KL term (beta 0), no vLLM importance-sampling factor."""
    return (
        trainer.loss_type in EXACT_AT_ZERO_ADVANTAGE and trainer.beta == 0.0 and not getattr(trainer, "use_vllm", False)
    )


def zero_advantage_loss(model: Any) -> Any:
    """The loss of a step whose every group had one reward (every advantage 0, e.g. all pass or all fail), without the
    forward pass: 0, whose backward gives every trainable parameter a gradient of exactly 0, as the full loss's does
    (each token's loss is -min(r·0, clip(r)·0)). The optimizer then steps as it would have (AdamW with a zero gradient
    still applies its momentum), so the trained weights are the same to the bit; only TRL's logged entropy and clip
    ratios of that step are not computed. About a third of the demo's steps have no informative group."""
    params = [p for p in model.parameters() if p.requires_grad]
    return sum((p * 0).sum() for p in params)


@functools.cache
def _rows_trainer_class() -> Any:
    """GRPOTrainer whose log-prob forward takes one rollout at a time, cut to its own tokens.

    TRL pads the step's rollouts to one (prompt + completion) width and runs them as one batch. The demo's multi-turn
    rollouts differ in length by up to 3x, so a third of that batch is padding, and a padded batch gets an explicit
    attention mask: the attention kernel then computes the full square instead of its causal half. On a CPU, where a
    batch buys no parallelism, one unpadded rollout after another does the same work 2.3x faster over four demo steps,
    1.7-2.8x per step (bench/grpo_forward.py). RoPE depends only on relative positions, so cutting a row's leading
    padding leaves its logprobs equal to float rounding; the rows' graphs stay alive together, so TRL's one backward
    over the step's loss is unchanged. Inputs with extra (vision) tensors take TRL's own path.
    """
    import torch
    from trl import GRPOTrainer

    class RowsGRPOTrainer(GRPOTrainer):
        skip_constant_steps = True  # compute_loss: see zero_advantage_loss
        skipped_steps = 0

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            skippable = self.skip_constant_steps and not return_outputs and zero_advantage_exact(self)
            if skippable and not torch.any(inputs["advantages"]):
                self.skipped_steps += 1
                return zero_advantage_loss(model)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **extra,
        ):
            whole = super()._get_per_token_logps_and_entropies
            prompt_width = input_ids.size(1) - logits_to_keep
            spans = []  # each rollout's first and last attended column
            for row in attention_mask:
                kept = row.nonzero().flatten()
                spans.append((int(kept[0]), int(kept[-1]) + 1) if len(kept) else (0, 0))
            # TRL's own path: extra (vision, MoE) inputs, or a rollout with no completion token
            own = compute_aux_loss or any(v is not None for v in extra.values())
            if own or any(end <= prompt_width for _, end in spans):
                args = (model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss)
                return whole(*args, **extra)
            logps, entropies = [], []
            for i, (start, end) in enumerate(spans):
                keep = end - prompt_width  # this rollout's completion columns; the rest are padding
                lp, ent, _ = whole(
                    model,
                    input_ids[i : i + 1, start:end],
                    attention_mask[i : i + 1, start:end],
                    keep,
                    compute_entropy=compute_entropy,
                )
                logps.append(torch.nn.functional.pad(lp, (0, logits_to_keep - keep)))
                if compute_entropy:
                    entropies.append(torch.nn.functional.pad(ent, (0, logits_to_keep - keep)))
            return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    return RowsGRPOTrainer


def build_trainer(
    model: Any,
    tokenizer: Any,
    make_env: EnvFactory,
    train_tasks: list[Any],
    cfg: TrainingConfig,
    output_dir: str,
    recorder: RolloutRecorder,
    callbacks: list[Any] | None = None,
    sampler_factory: Any = None,
    tracking: tuple[list[str], dict[str, Any]] | None = None,
):
    """A GRPOTrainer over `train_tasks` with a fresh LoRA adapter on a frozen `model` (`tracking`: grpo_config's)."""
    import os

    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer_class = _rows_trainer_class() if rows_forward(cfg) else GRPOTrainer
    return trainer_class(
        model=model,
        reward_funcs=[env_reward],
        args=grpo_config(cfg, output_dir, tracking),
        train_dataset=Dataset.from_dict({"prompt": [json.dumps(t) for t in train_tasks]}),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=LORA_DROPOUT,
            target_modules=list(ALL_PROJECTIONS),
            bias="none",
            task_type="CAUSAL_LM",
        ),
        rollout_func=make_rollout_func(make_env, cfg, tokenizer, recorder, sampler_factory),
        callbacks=callbacks or [],
    )
