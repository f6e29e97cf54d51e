"""Token-level samplers: context ids in, sampled ids + the sampler's logprobs out.

`TransformersSampler` generates in-process (CPU, tests, small GPUs): the active
rollouts of a turn are sampled as one left-padded batch; logprobs are the
log-softmax of the scores the sampler actually drew from (temperature applied,
top-k/top-p disabled so that equals TRL's `logits / temperature`); temperature 0
means greedy decoding (evaluation only).
`VLLMSampler` goes through TRL's own vLLM support (`trainer.vllm_generation`,
server or colocate mode), which returns the sampled ids with vLLM's logprobs.
A sample stops at the eos token (kept: it is part of what the model produced)
or at `max_new_tokens` (then `finished` is False).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class Sample:
    ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with an eos token


class Sampler(Protocol):
    def sample(self, contexts: list[list[int]], *, max_new_tokens: int, temperature: float) -> list[Sample]: ...


def _cut(ids: list[int], logprobs: list[float], stop: set[int], limit: int) -> Sample:
    for i, tok in enumerate(ids[:limit]):
        if tok in stop:
            return Sample(ids[: i + 1], logprobs[: i + 1], True)
    return Sample(ids[:limit], logprobs[:limit], False)


class TransformersSampler:
    """Batched sampling with `model.generate` (PEFT-wrapped models included)."""

    def __init__(self, model: Any, tokenizer: Any, *, seed: int = 0) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.eos_ids = {tokenizer.eos_token_id}
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.seed, self._calls = seed, 0

    def sample(self, contexts: list[list[int]], *, max_new_tokens: int, temperature: float) -> list[Sample]:
        import torch
        from transformers import GenerationConfig

        if not contexts:
            return []
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ctx in enumerate(contexts):
            input_ids[row, width - len(ctx):] = torch.tensor(ctx)
            attention[row, width - len(ctx):] = 1
        greedy = temperature <= 0  # evaluation only: argmax decoding
        gen = GenerationConfig(do_sample=not greedy, temperature=None if greedy else temperature, top_k=None if greedy else 0,
                               top_p=None if greedy else 1.0, max_new_tokens=max_new_tokens,
                               eos_token_id=sorted(self.eos_ids), pad_token_id=self.pad_id)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(self.seed * 1_000_003 + self._calls)
                self._calls += 1
                out = self.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=gen,
                                          return_dict_in_generate=True, output_scores=True)
        finally:
            if was_training:
                self.model.train()
        new = out.sequences[:, width:]
        scores = torch.stack(out.scores, dim=1).float().log_softmax(-1)  # (B, T, V): what the sampler drew from
        logps = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [_cut(new[r].tolist(), logps[r].tolist(), self.eos_ids, max_new_tokens) for r in range(len(contexts))]


class VLLMSampler:
    """Through TRL's vLLM generation (GPU): `trainer.vllm_generation.generate(prompts=ids, ...)`.

    TRL caps each call at GRPOConfig.max_completion_length tokens; the per-turn cap is applied here.
    TRL syncs the LoRA weights into vLLM before calling rollout_func."""

    def __init__(self, vllm_generation: Any, eos_ids: set[int]) -> None:
        self.vllm_generation, self.eos_ids = vllm_generation, eos_ids

    def sample(self, contexts: list[list[int]], *, max_new_tokens: int, temperature: float) -> list[Sample]:
        if not contexts:
            return []
        _, completions, logprobs, _ = self.vllm_generation.generate(prompts=contexts, images=None, num_generations=1)
        out = []
        for ids, lps in zip(completions, logprobs, strict=True):
            flat = [float("nan") if (lp[0] if isinstance(lp, list) else lp) is None else float(lp[0] if isinstance(lp, list) else lp)
                    for lp in lps]
            out.append(_cut(list(ids), flat, self.eos_ids, max_new_tokens))
        return out
