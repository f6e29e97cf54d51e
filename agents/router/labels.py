"""The paper's label scorer (routing.backend transformers / vllm): the frozen base model reads the routing prompt
(`Router.messages`: the target's name and the opening of its policy document, the task's first user message, one
single-token label per capability with its definition and example, one more label for "none"), and the scores are the
next-token log-probabilities of the label tokens after it: ONE forward pass, never generation. A label that is not
exactly one token of the tokenizer is refused when the router is built.

Two transports of the same scorer:
- `TransformersScorer`: a forward pass of a local Hugging Face model (right-padded batch, the last real position of
  each row). `context` wraps the pass, e.g. to hold the serving lock and disable the adapters of a shared PeftModel
  so the FROZEN base model decides.
- `CompletionsScorer`: a vLLM server's `/v1/completions` with the prompt sent as token ids (rendered by the local
  tokenizer, so label ids and prompt agree), `max_tokens=1`, `logprob_token_ids` = the label ids and
  `return_tokens_as_token_ids` so the answer is keyed `token_id:N`.
Both return log-softmax over the full vocabulary, so margins (differences) are logit differences on either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from gapforge.agents.errors import ModelEndpointError
from gapforge.agents.router.router import Router, RouterError

DEFAULT_TEMPLATE_KWARGS = {"enable_thinking": False}


class LabelScorer:
    """The label scorer over a tokenizer; a transport implements `label_logprobs` (next-token log-probabilities of
    the given token ids after each chat-templated prompt)."""

    portable = False  # a model forward pass or a server: a worker process does not route with a copy

    def __init__(self, tokenizer: Any = None, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = DEFAULT_TEMPLATE_KWARGS if template_kwargs is None else template_kwargs

    def label_token_ids(self, label: str) -> list[int]:
        return list(self.tokenizer.encode(label, add_special_tokens=False))

    def render(self, messages: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.template_kwargs
        )

    def label_logprobs(self, prompts: list[str], token_ids: list[int]) -> list[list[float]]:
        raise NotImplementedError

    def token_ids(self, labels: list[str]) -> list[int]:
        """One token id per label (RouterError: a label of several tokens, or two labels on one token)."""
        ids = []
        for label in labels:
            tokens = self.label_token_ids(label)
            if len(tokens) != 1:
                raise RouterError(
                    f"router label {label!r} is {len(tokens)} tokens of this tokenizer, not 1: use single-token labels "
                    "in routing.labels (e.g. A, B, C)"
                )
            ids.append(tokens[0])
        if len(set(ids)) != len(ids):
            raise RouterError(f"labels {labels} map to repeated token ids {ids}: choose labels with distinct tokens")
        return ids

    def check_labels(self, labels: list[str]) -> None:
        self.token_ids(labels)

    def scores(self, router: Router, first_user_messages: list[str]) -> list[list[float]]:
        """The routing prompt of each message, sent in batches of `routing.batch_size`."""
        token_ids = self.token_ids(router.labels)
        prompts = [self.render(router.messages(m)) for m in first_user_messages]
        size = router.config.batch_size
        out: list[list[float]] = []
        for start in range(0, len(prompts), size):
            out.extend(self.label_logprobs(prompts[start : start + size], token_ids))
        return out


class TransformersScorer(LabelScorer):
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(tokenizer, template_kwargs)
        self.model = model
        self.context = context or contextlib.nullcontext

    @classmethod
    def from_pretrained(cls, path: str | Path, **kw: Any) -> TransformersScorer:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not (Path(path) / "config.json").is_file():
            raise RouterError(
                f"{path} is not a Hugging Face model directory (no config.json): point the router at the base model"
            )
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
        return cls(model, tok, **kw)

    def label_logprobs(self, prompts: list[str], token_ids: list[int]) -> list[list[float]]:
        import torch

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        encoded = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, : len(e)] = torch.tensor(e)
            mask[i, : len(e)] = 1
        last = torch.tensor([len(e) - 1 for e in encoded])
        with self.context(), torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits
        rows = logits[torch.arange(len(encoded)), last].float().log_softmax(-1)
        return rows[:, token_ids].tolist()


class CompletionsScorer(LabelScorer):
    """vLLM's completions API (0.33: `logprob_token_ids`, `return_tokens_as_token_ids`)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(tokenizer, template_kwargs)
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        self._client.close()

    def label_logprobs(self, prompts: list[str], token_ids: list[int]) -> list[list[float]]:
        body = {
            "model": self.model,
            "prompt": [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts],
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": 1,
            "logprob_token_ids": list(token_ids),
            "return_tokens_as_token_ids": True,
        }
        try:
            resp = self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            raise ModelEndpointError(
                f"router endpoint {self.url} unreachable ({type(e).__name__}): "
                "start the vLLM server or fix policy.endpoint.base_url"
            ) from None
        if resp.status_code != 200:
            raise ModelEndpointError(f"router endpoint {self.url} answered {resp.status_code}: {resp.text[:200]}")
        choices = sorted(resp.json().get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(prompts):
            raise ModelEndpointError(f"router endpoint returned {len(choices)} choices for {len(prompts)} prompts")
        out = []
        for c in choices:
            top = ((c.get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}
            row = []
            for tid in token_ids:
                key = f"token_id:{tid}"
                if key not in top:
                    raise ModelEndpointError(
                        f"router endpoint gave no logprob for label token id {tid}: it needs vLLM >= 0.33 "
                        "(logprob_token_ids)"
                    )
                row.append(float(top[key]))
            out.append(row)
        return out
