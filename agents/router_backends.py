"""Label scorers for the router: next-token log-probabilities of the label token ids.

- `TransformersScorer`: a forward pass of a local Hugging Face model (right-padded
  batch, the last real position of each row). `context` wraps the pass, e.g. to
  hold the serving lock and disable the adapters of a shared PeftModel so the
  FROZEN base model decides.
- `CompletionsScorer`: a vLLM server's `/v1/completions` with the prompt sent as
  token ids (rendered by the local tokenizer, so label ids and prompt agree),
  `max_tokens=1`, `logprob_token_ids` = the label ids and
  `return_tokens_as_token_ids` so the answer is keyed `token_id:N`. Both return
  log-softmax over the full vocabulary, so margins (differences) are logit
  differences on either backend.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from gapforge.agents.errors import ModelEndpointError
from gapforge.agents.router import RouterError

DEFAULT_TEMPLATE_KWARGS = {"enable_thinking": False}


class _TokenizerMixin:
    tokenizer: Any
    template_kwargs: dict[str, Any]

    def label_token_ids(self, label: str) -> list[int]:
        return list(self.tokenizer.encode(label, add_special_tokens=False))

    def render(self, messages: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.template_kwargs
        )


class TransformersScorer(_TokenizerMixin):
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.context = context or contextlib.nullcontext
        self.template_kwargs = DEFAULT_TEMPLATE_KWARGS if template_kwargs is None else template_kwargs

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


class CompletionsScorer(_TokenizerMixin):
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
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.tokenizer = tokenizer
        self.template_kwargs = DEFAULT_TEMPLATE_KWARGS if template_kwargs is None else template_kwargs
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
                "start the vLLM server or fix routing.vllm_base_url"
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
                        f"router endpoint gave no logprob for label token id {tid}: it needs vLLM >= 0.33 (logprob_token_ids)"
                    )
                row.append(float(top[key]))
            out.append(row)
        return out


_WORD = re.compile(r"[a-z']+")


def opening_words(text: str) -> frozenset[str]:
    """The words of a first user message, lower-cased; ids, emails and numbers (a token with a digit, '@' or '#') left out."""
    kept = (t for t in text.lower().split() if not any(c.isdigit() or c in "@#" for c in t))
    return frozenset(w for w in _WORD.findall(" ".join(kept)))


class OpeningsScorer:
    """Routing by the openings each adapter was trained on (`routing.backend: openings`).

    A stand-in for a base model too small to read the routing prompt (the offline demo's ~1M-parameter
    policy): each capability's score is the highest word overlap (Jaccard, ids left out) between the
    task's first user message and the first user messages of its synthetic env's held-out seeds; the
    "none" label scores `min_similarity`, so a task unlike every env's openings keeps the base model.
    Scores play the role of logprobs in Router.decide (argmax, margin). Pure data and deterministic
    (`portable`): a worker process routing with a copy decides exactly as this process does."""

    portable = True

    def __init__(self, openings: list[list[str]], *, min_similarity: float = 0.5) -> None:
        if not all(openings):
            raise RouterError(
                "routing.backend=openings needs at least one opening per capability (its synthetic env's first user messages)"
            )
        self.openings = [[opening_words(o) for o in per] for per in openings]
        self.min_similarity = min_similarity

    def label_token_ids(self, label: str) -> list[int]:
        return [ord(label[0])] if len(label) == 1 else [ord(c) for c in label]

    def scores(self, first_user_messages: list[str]) -> list[list[float]]:
        """One row per message: a score per capability (in option order), then the none label's."""
        rows = []
        for message in first_user_messages:
            words = opening_words(message)
            row = [max((len(words & o) / len(words | o) if words | o else 0.0) for o in per) for per in self.openings]
            rows.append([*row, self.min_similarity])
        return rows
