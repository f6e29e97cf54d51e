"""Counting what the analyst costs: calls and tokens, through LangChain callbacks. The endpoint's reported usage is
used when present; the scripted model reports none, so callers fall back to the token counter's estimate.
"""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler


class UsageCounter(BaseCallbackHandler):
    run_inline = True  # count on the caller's thread/loop, never deferred

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        p = c = 0
        for gens in response.generations:
            for gen in gens:
                meta = getattr(getattr(gen, "message", None), "usage_metadata", None) or {}
                p += int(meta.get("input_tokens", 0) or 0)
                c += int(meta.get("output_tokens", 0) or 0)
        with self._lock:
            self.calls += 1
            self.prompt_tokens += p
            self.completion_tokens += c

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        with self._lock:
            self.calls += 1  # a failed request is still a call made


def seeded(model: Any, seed: int, temperature: float | None) -> Any:
    """The same chat model with a sampling seed and temperature (OpenAI `seed`), when it has those fields."""
    fields = getattr(type(model), "model_fields", {})
    update: dict[str, Any] = {}
    if "seed" in fields:
        update["seed"] = seed
    if temperature is not None and "temperature" in fields:
        update["temperature"] = temperature
    return model.model_copy(update=update) if update else model
