"""GRPO through TRL with our rollout_func: the ids TRL trains on, env masks, crashes, the config."""

from __future__ import annotations

import pytest
import torch

from gapforge.training.config import TrainingConfig
from gapforge.training.grpo import (
    RolloutRecorder,
    build_trainer,
    groups_of,
    grpo_config,
    informative_share,
)
from gapforge.training.sampler import TransformersSampler
from tests.training.toy_env import ToyDeskEnv

CFG = TrainingConfig.tiny(
    max_steps=2,
    groups_per_step=2,
    num_generations=2,
    max_turns=3,
    max_new_tokens=8,
    max_completion_length=256,
    train_seeds=4,
    learning_rate=5e-2,
)

pytestmark = pytest.mark.slow  # trains a tiny model


class RecordingSampler(TransformersSampler):
    def __init__(self, *a, log, **kw):
        super().__init__(*a, **kw)
        self.log = log

    def sample(self, contexts, **kw):
        out = super().sample(contexts, **kw)
        self.log.extend(s.ids for s in out)
        return out


def _trainer(model, tokenizer, tmp_path, make_env=ToyDeskEnv, log=None, cfg=CFG):
    recorder = RolloutRecorder()
    factory = None
    if log is not None:
        factory = lambda tr: RecordingSampler(tr.accelerator.unwrap_model(tr.model), tokenizer, log=log)
    trainer = build_trainer(
        model,
        tokenizer,
        make_env,
        list(range(cfg.train_seeds)),
        cfg,
        str(tmp_path / "trl"),
        recorder,
        sampler_factory=factory,
    )
    return trainer, recorder


def test_trl_trains_on_exactly_the_sampled_ids_with_env_tokens_masked(tiny_model, tiny_tokenizer, tmp_path):
    sampled: list[list[int]] = []
    trainer, recorder = _trainer(tiny_model, tiny_tokenizer, tmp_path, log=sampled)
    seen = []
    original = trainer._generate_and_score_completions

    def capture(inputs):
        out = original(inputs)
        seen.append(
            (
                out["completion_ids"].clone(),
                out["tool_mask"].clone(),
                out["completion_mask"].clone(),
                list(recorder.last),
            )
        )
        return out

    trainer._generate_and_score_completions = capture
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert before and all("lora" in n for n in before)  # base weights frozen
    trainer.train()
    assert seen
    model_ids_in_batches = []
    for completion_ids, tool_mask, completion_mask, rollouts in seen:
        for row, r in enumerate(rollouts):
            n = len(r.traj.completion_ids)
            assert completion_ids[row, :n].tolist() == r.traj.completion_ids
            assert tool_mask[row, :n].tolist() == r.traj.env_mask
            assert completion_mask[row, :n].sum().item() == n
            model_ids_in_batches += [ids for m, ids in r.traj.spans() if m]
    assert sorted(model_ids_in_batches) == sorted(sampled)  # every loss-token span is one sampled turn, and back
    assert any(0 in r.traj.env_mask for *_, rs in seen for r in rs)  # multi-turn: env turns were appended
    changed = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(before[n], p)]
    assert changed, "no adapter parameter changed"


@pytest.mark.parametrize("lose_sandbox,boundary", [(False, "env"), (True, "infra")])
def test_a_rollout_an_env_or_infrastructure_fault_ended_is_dropped_from_the_loss(
    tiny_model, tiny_tokenizer, tmp_path, lose_sandbox, boundary
):
    """Never trained on as reward 0: its sampled tokens are masked in what TRL trains on, the reward TRL
    sees is its group's healthy mean, and each step counts the dropped rollouts; training goes on."""
    trainer, recorder = _trainer(
        tiny_model, tiny_tokenizer, tmp_path, make_env=lambda: ToyDeskEnv(crash_at=2, lose_sandbox=lose_sandbox)
    )
    seen = []
    original = trainer._generate_and_score_completions

    def capture(inputs):
        out = original(inputs)
        seen.append((out["tool_mask"].clone(), list(recorder.last)))
        return out

    trainer._generate_and_score_completions = capture
    trainer.train()
    assert trainer.state.global_step == CFG.max_steps
    dropped = [(mask, row, r) for mask, rs in seen for row, r in enumerate(rs) if r.dropped == boundary]
    assert dropped  # odd seeds fail at their second step
    for mask, row, r in dropped:
        assert r.failure.startswith(f"{boundary}: ") and r.traj.env_mask and set(r.traj.env_mask) == {0}
        assert mask[row, : len(r.traj.env_mask)].sum().item() == 0  # TRL's loss mask: none of its tokens
    assert sum(getattr(s, f"dropped_{boundary}") for s in recorder.steps) == sum(1 for _ in dropped)
    healthy = [r for *_, r in [(m, i, r) for m, rs in seen for i, r in enumerate(rs)] if r.dropped is None]
    assert healthy and all(1 in r.traj.env_mask for r in healthy)  # the others still train


def test_a_dropped_rollout_gets_its_groups_healthy_mean_not_zero():
    from gapforge.training.grpo import trained_rewards
    from gapforge.training.rollout import TokenRollout
    from gapforge.training.tokens import TokenTrajectory

    def r(reward, failure=None):
        return TokenRollout(task=1, traj=TokenTrajectory(prompt_ids=[1]), reward=reward, failure=failure)

    assert trained_rewards(
        [r(0.2), r(0.0, "env: RuntimeError: x"), r(0.6), r(0.0, "infra: killed: y")]
    ) == pytest.approx([0.2, 0.4, 0.6, 0.4])
    assert trained_rewards([r(0.0, "model: malformed"), r(1.0)]) == [0.0, 1.0]  # the model's own failure is trained on
    assert trained_rewards([r(0.0, "infra: killed"), r(0.0, "env: boom")]) == [0.0, 0.0]


def test_groups_and_informative_share():
    assert groups_of(["1", "1", "2", "2", "1"]) == [("1", 2), ("2", 2), ("1", 1)]
    assert informative_share([[0.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 0.2]]) == 0.5


def test_grpo_config_from_training_config(tmp_path):
    args = grpo_config(TrainingConfig(), str(tmp_path))
    assert (args.learning_rate, args.max_steps, args.num_generations, args.temperature) == (1e-5, 40, 8, 1.0)
    assert args.per_device_train_batch_size == 16 and args.use_vllm is False
    vllm = grpo_config(TrainingConfig(generation="vllm_server", vllm_server_base_url="http://gpu:8000"), str(tmp_path))
    assert vllm.use_vllm and vllm.vllm_mode == "server" and vllm.vllm_server_base_url == "http://gpu:8000"
    assert grpo_config(TrainingConfig(generation="vllm_colocate"), str(tmp_path)).vllm_mode == "colocate"


def test_grpo_config_sets_checkpointing_by_its_current_name(tmp_path):
    """transformers 5 warns at every config built with the old `gradient_checkpointing` name; both names still agree."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cpu = grpo_config(TrainingConfig(), str(tmp_path))
        gpu = grpo_config(
            TrainingConfig(generation="vllm_server", vllm_server_base_url="http://gpu:8000"), str(tmp_path)
        )
    assert not [w for w in seen if "checkpointing" in str(w.message)]
    assert (cpu.activation_checkpointing, cpu.gradient_checkpointing) == (False, False)
    assert (gpu.activation_checkpointing, gpu.gradient_checkpointing) == (True, True)


def test_the_rows_forward_gives_trls_padded_batch_logprobs_entropies_and_gradients(
    tiny_model, tiny_tokenizer, tmp_path
):
    """On CPU the loss's forward takes each rollout alone, cut to its own tokens (TrainingConfig.loss_forward):
    the same logprobs, entropies and adapter gradients as TRL's one padded batch, to float rounding."""
    from trl import GRPOTrainer

    trainer, _ = _trainer(tiny_model, tiny_tokenizer, tmp_path)
    assert type(trainer) is not GRPOTrainer and isinstance(trainer, GRPOTrainer)  # auto on CPU: rows
    gen = torch.Generator().manual_seed(0)
    for p in (p for n, p in trainer.model.named_parameters() if "lora_B" in n):
        p.data.normal_(0, 0.05, generator=gen)  # a non-zero adapter, so its gradients depend on every row's tokens
    prompts, completions = [5, 9, 2], [7, 1, 12]  # left-padded prompts, right-padded completions of other lengths
    pw, cw, vocab = max(prompts), max(completions), tiny_model.config.vocab_size
    ids = torch.randint(4, vocab, (3, pw + cw), generator=gen)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        mask[i, pw - p : pw + c] = 1
    ids = ids.masked_fill(mask == 0, tiny_tokenizer.pad_token_id)
    loss_mask = mask[:, pw:].float()

    def run(fn):
        logps, entropies, _ = fn(trainer, trainer.model, ids, mask, cw, compute_entropy=True)
        (-(logps * loss_mask).sum() - (entropies * loss_mask).sum()).backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        trainer.model.zero_grad()
        return (logps * loss_mask).detach(), (entropies * loss_mask).detach(), grads

    rows, padded = (
        run(type(trainer)._get_per_token_logps_and_entropies),
        run(GRPOTrainer._get_per_token_logps_and_entropies),
    )
    assert torch.allclose(rows[0], padded[0], atol=1e-5) and torch.allclose(rows[1], padded[1], atol=1e-5)
    assert rows[2].keys() == padded[2].keys() and len(rows[2]) > 0
    for name, grad in padded[2].items():
        assert torch.allclose(rows[2][name], grad, atol=1e-5, rtol=1e-4), name
    assert (rows[0] != 0).sum() == sum(completions)  # every completion token scored, no padding


def test_loss_forward_batched_keeps_trls_own_trainer(tiny_model, tiny_tokenizer, tmp_path):
    from trl import GRPOTrainer

    trainer, _ = _trainer(tiny_model, tiny_tokenizer, tmp_path, cfg=CFG.model_copy(update={"loss_forward": "batched"}))
    assert type(trainer) is GRPOTrainer
