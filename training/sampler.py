"""Token-level samplers: context ids in, sampled ids + the sampler's logprobs out.

`TransformersSampler` generates in-process (CPU, tests, small GPUs): the active rollouts of a turn are sampled as one
batch (serving.batching.BatchGenerator); logprobs are the log-softmax of the logits the sampler actually drew from
(temperature applied, no top-k/top-p, so that equals TRL's `logits / temperature`); temperature 0 means greedy
decoding (evaluation only). `VLLMSampler` goes through TRL's own vLLM support (`trainer.vllm_generation`, server or
colocate mode), which returns the sampled ids with vLLM's logprobs. A sample stops at the eos token (kept: it is part
of what the model produced) or at `max_new_tokens` (then `finished` is False).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class Sample:
    ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with an eos token


class Sampler(Protocol):
    def sample(
        self, contexts: list[list[int]], *, max_new_tokens: int, temperature: float, keys: list[Hashable] | None = None
    ) -> list[Sample]:
        """`keys` (one per context, unique within the sampler): a sampler that seeds rows may seed each from its key,
        so that a row's tokens do not depend on which other rows share its batch."""
        ...


def keyed_row_seed(seed: int, key: Hashable) -> int:
    """A row's sampling seed from (the sampler's seed, the row's key): stable across processes (no hash())."""
    digest = hashlib.sha256(f"{seed}\0{key!r}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _cut(ids: list[int], logprobs: list[float], stop: set[int], limit: int) -> Sample:
    for i, tok in enumerate(ids[:limit]):
        if tok in stop:
            return Sample(ids[: i + 1], logprobs[: i + 1], True)
    return Sample(ids[:limit], logprobs[:limit], False)


class TransformersSampler:
    """Batched sampling in-process (PEFT-wrapped models included) through serving.batching: each context prefilled
    alone, the KV caches joined, a row leaves the batch at its eos; row r of call n samples with its own generator
    seeded from (seed, n, r), or from (seed, its key) when the caller keys its rows (training.rollout.run_groups), so
    the global RNG is never touched. Keys do not include the call: a sampler keyed by rows serves one run_groups call
    (a GRPO step builds its own, seeded with the step; each held-out evaluation too), or the same keys would replay
    the same tokens. A new sampler per step also means a new generator: the prefixes it keeps between the turns of a
    step (serving.batching) never outlive the weights that computed them."""

    def __init__(self, model: Any, tokenizer: Any, *, seed: int = 0) -> None:
        from gapforge.serving.batching import BatchGenerator

        self.model, self.tokenizer = model, tokenizer
        self.eos_ids = {tokenizer.eos_token_id}
        self.generator = BatchGenerator(model, eos_ids=self.eos_ids)
        self.seed, self._calls = seed, 0

    def sample(
        self, contexts: list[list[int]], *, max_new_tokens: int, temperature: float, keys: list[Hashable] | None = None
    ) -> list[Sample]:
        if not contexts:
            return []
        call, self._calls = self._calls, self._calls + 1
        if keys is not None:
            if len(keys) != len(contexts):
                raise ValueError(f"{len(keys)} keys for {len(contexts)} contexts")
            seeds = [keyed_row_seed(self.seed, key) for key in keys]
        else:
            seeds = [(self.seed * 1_000_003 + call) * 4_099 + row for row in range(len(contexts))]
        was_training = self.model.training
        self.model.eval()
        try:
            decoded = self.generator.run_batch(
                contexts, seeds=seeds, temperature=max(temperature, 0.0), max_new_tokens=max_new_tokens
            )
        finally:
            if was_training:
                self.model.train()
        return [Sample(d.ids, d.logprobs, bool(d.ids) and d.ids[-1] in self.eos_ids) for d in decoded]


class VLLMSampler:
    """Through TRL's vLLM generation (GPU): `trainer.vllm_generation.generate(prompts=ids, ...)`.

    TRL caps each call at GRPOConfig.max_completion_length tokens; the per-turn cap is applied here. TRL syncs the
    LoRA weights into vLLM before calling rollout_func."""

    def __init__(self, vllm_generation: Any, eos_ids: set[int]) -> None:
        self.vllm_generation, self.eos_ids = vllm_generation, eos_ids

    def sample(
        self, contexts: list[list[int]], *, max_new_tokens: int, temperature: float, keys: list[Hashable] | None = None
    ) -> list[Sample]:
        if not contexts:  # keys unused: vLLM seeds its own requests
            return []
        _, completions, logprobs, _ = self.vllm_generation.generate(prompts=contexts, images=None, num_generations=1)
        out = []
        for ids, lps in zip(completions, logprobs, strict=True):
            firsts = [lp[0] if isinstance(lp, list) else lp for lp in lps]
            flat = [float("nan") if lp is None else float(lp) for lp in firsts]
            out.append(_cut(list(ids), flat, self.eos_ids, max_new_tokens))
        return out
