"""One base model with every adapter loaded once (transformers + PEFT), for the routed endpoint and evaluation on CPU.

`MultiAdapterModel(model_path, {name: adapter_dir})` loads the base model once and each LoRA adapter into the same
PeftModel under its name. `respond(..., adapter=name|None)` generates through serving.batching: concurrent requests
for the same adapter are decoded as one batch, and a batch runs with its adapter selected while holding one lock, so
requests for different adapters never see each other's adapter (PEFT's active adapter is model-global state). With
`mix_adapters` (off by default), one batch holds every adapter's rows, each with its own LoRA (serving.fast_forward):
measured slower under `gapforge serve` at 64 conversations (16.6-19.4 vs 21.4-22.2 requests/s,
docs/experiments/engine.md). Seeds follow serving.local.Generation (per episode key, else per call). `None` = the
base model with every adapter disabled. `policy(name)` is an `envs.protocol.PolicyModel` view bound to one adapter;
`base_context()` is the lock + adapters-off context the router's TransformersScorer uses so the FROZEN base model
decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import Message
from gapforge.serving.chat_format import load_tokenizer, tool_format_of
from gapforge.serving.errors import ServingError, adapter_dir, check_temperature, model_dir
from gapforge.serving.local import Generation, call_ids, render_prompt
from gapforge.serving.tool_calls import parse_turn


class MultiAdapterModel:
    def __init__(
        self,
        model_path: str | Path,
        adapters: dict[str, str | Path] | None = None,
        *,
        max_new_tokens: int = 512,
        seed: int = 0,
        template_kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        mix_adapters: bool = False,
    ) -> None:
        from transformers import AutoModelForCausalLM

        self.model_path = model_dir(model_path, ": point it at the base model")
        self.name = name or self.model_path.name
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        # default: the prompt training and LocalPolicy render (no kwargs; serving.local.render_prompt);
        # any extra kwarg (e.g. enable_thinking=False's empty think block) is a prompt the adapters never saw
        self.template_kwargs = dict(template_kwargs or {})
        self.tokenizer = load_tokenizer(self.model_path)  # the chat format the adapters were trained with
        self.tool_format = tool_format_of(self.tokenizer.chat_template)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, local_files_only=True)
        self.adapter_paths = {k: Path(v) for k, v in (adapters or {}).items()}
        for adapter, path in self.adapter_paths.items():
            adapter_dir(path, f"adapter '{adapter}': ")
            if adapter == self.name:
                raise ServingError(f"adapter name '{adapter}' equals the base model's name: rename the adapter")
        if self.adapter_paths:
            from peft import PeftModel

            first, *rest = self.adapter_paths.items()
            model = PeftModel.from_pretrained(model, first[1], adapter_name=first[0], is_trainable=False)
            for adapter, path in rest:
                model.load_adapter(path, adapter_name=adapter, is_trainable=False)
        self.model = model.eval()
        self._lock = threading.Lock()
        mix = _same if mix_adapters else None  # a request's group is its adapter
        self._generation = Generation(
            self.model, self.tokenizer, seed=seed, lock=self._lock, select=self._selected, adapter_of=mix
        )

    @property
    def adapters(self) -> list[str]:
        return list(self.adapter_paths)

    def load_adapter(self, adapter: str, path: str | Path) -> None:
        """Add one LoRA adapter at run time (a vLLM server's /v1/load_lora_adapter); batches wait for it (the lock)."""
        path = adapter_dir(path, f"adapter '{adapter}': ")
        if adapter == self.name or adapter in self.adapter_paths:
            raise ServingError(
                f"adapter name '{adapter}' is already served: load each adapter version under a new name"
            )
        from peft import PeftModel

        with self._generation.batcher.exclusive():  # the lock, and a running batch stops admitting meanwhile
            if isinstance(self.model, PeftModel):
                self.model.load_adapter(path, adapter_name=adapter, is_trainable=False)
            else:
                self.model = PeftModel.from_pretrained(
                    self.model, path, adapter_name=adapter, is_trainable=False
                ).eval()
                self._generation.batcher.model = self.model
            self.adapter_paths[adapter] = path

    def _check(self, adapter: str | None) -> None:
        if adapter is not None and adapter not in self.adapter_paths:
            raise ServingError(f"unknown adapter '{adapter}': known adapters are {', '.join(self.adapters) or 'none'}")

    @contextlib.contextmanager
    def _selected(self, adapter: str | None) -> Iterator[None]:
        """Caller holds the lock. Activate one adapter, or none (the base model)."""
        self._check(adapter)
        if not self.adapter_paths:
            yield
        elif adapter is None:
            with self.model.disable_adapter():
                yield
        else:
            self.model.set_adapter(adapter)
            yield

    @contextlib.contextmanager
    def base_context(self) -> Iterator[None]:
        """Lock + every adapter off: the frozen base model (the router's forward pass)."""
        with self._generation.batcher.exclusive(), self._selected(None):
            yield

    def render(self, messages: list[Message], tools: list[dict[str, Any]]) -> str:
        return render_prompt(self.tokenizer, messages, tools, **self.template_kwargs)

    async def respond(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        adapter: str | None = None,
        temperature: float = 0.0,
        max_new_tokens: int | None = None,
    ) -> Message:
        check_temperature(temperature)
        self._check(adapter)
        text = await self._generation.complete(
            self.render(messages, tools),
            position=len(messages),
            temperature=temperature,
            max_new_tokens=capped(max_new_tokens, self.max_new_tokens),
            group=adapter,
        )
        return parse_turn(text, self.tool_format, id_factory=call_ids(self.seed, len(messages)))  # replayable ids

    async def aclose(self) -> None:
        """Stop the generation worker."""
        await asyncio.to_thread(self._generation.batcher.close)

    def policy(self, adapter: str | None, *, temperature: float = 1.0, name: str | None = None) -> AdapterPolicy:
        self._check(adapter)
        return AdapterPolicy(self, adapter, temperature, name or (adapter or self.name))


def _same(adapter: str | None) -> str | None:
    return adapter


def capped(requested: int | None, limit: int) -> int:
    """A request's token limit, never above the config's `limit`."""
    return limit if requested is None else max(1, min(requested, limit))


class AdapterPolicy:
    """envs.protocol.PolicyModel: one adapter (or the base) of a shared backend (MultiAdapterModel, VLLMBackend)."""

    def __init__(self, backend: Any, adapter: str | None, temperature: float, name: str) -> None:
        self.backend, self.adapter, self.temperature, self.name = backend, adapter, temperature, name

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        temp = self.temperature if temperature is None else temperature
        return await self.backend.respond(messages, tools, adapter=self.adapter, temperature=temp)
