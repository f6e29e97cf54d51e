"""LocalPolicy: a transformers (+ optional PEFT adapter) policy backend for CPU runs and tests.

It implements envs.protocol.PolicyModel: render the conversation and the tool schemas with the model's own chat
template, generate, and parse `<tool_call>` blocks back into tool calls (serving.tool_calls). Generation runs on a
serving.batching.BatchGenerator worker thread, so `respond()` never blocks the event loop and concurrent episodes are
decoded together as one batch.

Sampling is reproducible (the global RNG is left untouched): inside an episode (envs.sampling.episode_key set by the
collector) a call samples with a seed drawn from (the policy's seed, the episode key, the conversation length), so the
same episode gets the same tokens, and the same tool-call ids, at any concurrency and on any executor (tests/executor:
Ray vs local); outside one, call n of a policy built with seed s samples with seed s + n.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from gapforge.envs.errors import PolicyError
from gapforge.envs.protocol import Message
from gapforge.envs.sampling import episode_key, keyed_seed
from gapforge.serving.batching import BatchGenerator, eos_ids_of, lanes_only
from gapforge.serving.chat_format import tool_format_of
from gapforge.serving.errors import ServingError, adapter_dir, check_temperature, model_dir
from gapforge.serving.tool_calls import new_call_id, parse_turn


def to_template_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as chat-template dicts (Hugging Face convention: tool-call arguments as dicts)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.reasoning is not None:  # Qwen3-style templates render it back (serving.chat_format)
            item["reasoning_content"] = m.reasoning
        if m.tool_calls:
            item["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in m.tool_calls
            ]
        if m.role == "tool":
            item["tool_call_id"] = m.tool_call_id
            if m.name:
                item["name"] = m.name
        out.append(item)
    return out


def render_prompt(
    tokenizer: Any,
    messages: list[Message],
    tools: list[dict[str, Any]],
    *,
    generation_prompt: bool = True,
    **template_kwargs: Any,
) -> str:
    """The prompt text a policy model sees, for rollouts (LocalPolicy) and serving (MultiAdapterModel), with the
    tokenizer's installed chat format (serving.chat_format.load_tokenizer: the template training samples and
    trains with). training.tokens.render is the same call (kept there: its bytes are part of the taught model's
    recipe hash); tests/serving/test_local.py asserts the three render identically."""
    kwargs = {"tools": tools or None, "add_generation_prompt": generation_prompt, "tokenize": False}
    return tokenizer.apply_chat_template(to_template_messages(messages), **kwargs, **template_kwargs)


def call_ids(seed: int, position: int) -> Callable[[], str]:
    """Tool-call ids for the turn at `position`: inside an episode derived from (seed, episode key, position),
    so a replayed episode (another executor, another machine) has the same ids; random outside one."""
    key = episode_key.get()
    if key is None:
        return new_call_id
    base, counter = keyed_seed(seed, key, position), itertools.count()
    return lambda: f"call_{base:016x}{next(counter):08x}"


class Generation:
    """Prompt text -> completion text through one model's BatchGenerator, with the seed rule above
    and the context-length check (shared by LocalPolicy and serving.multi_adapter.MultiAdapterModel)."""

    def __init__(self, model: Any, tokenizer: Any, *, seed: int, **batching: Any) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.context = getattr(model.config, "max_position_embeddings", None)
        gen = getattr(model, "generation_config", None)  # its top_k / top_p apply when sampling, as in generate()
        top = {"top_k": getattr(gen, "top_k", None), "top_p": getattr(gen, "top_p", None)}
        lanes_only()  # the decoding runs on the generator's lane: no parallel op on the main thread from here on
        self.batcher = BatchGenerator(model, eos_ids=eos_ids_of(model, tokenizer), **top, **batching)
        self._calls = itertools.count()

    def seed_for(self, position: int) -> int:
        key = episode_key.get()
        return self.seed + next(self._calls) if key is None else keyed_seed(self.seed, key, position)

    async def complete(
        self, prompt: str, *, position: int, temperature: float, max_new_tokens: int, group: Hashable = None
    ) -> str:
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if self.context is not None and len(ids) + max_new_tokens > self.context:
            raise PolicyError(
                f"prompt of {len(ids)} tokens + max_new_tokens {max_new_tokens} exceeds the model context of {self.context}"
            )
        future = self.batcher.submit(
            ids, temperature=temperature, max_new_tokens=max_new_tokens, seed=self.seed_for(position), group=group
        )
        out = await asyncio.wrap_future(future)
        return self.tokenizer.decode(out, skip_special_tokens=True)


class LocalPolicy:
    """A Hugging Face causal LM from a local directory, optionally with a PEFT (LoRA) adapter."""

    def __init__(
        self,
        model_path: str | Path,
        adapter_path: str | Path | None = None,
        *,
        temperature: float = 1.0,
        max_new_tokens: int = 512,
        seed: int = 0,
        name: str | None = None,
        dtype: str = "auto",
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        check_temperature(temperature)
        if max_new_tokens < 1:
            raise ServingError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model_path = Path(model_path)  # checked in _load, after the arguments
        self.adapter_path = Path(adapter_path) if adapter_path is not None else None
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.template_kwargs = dict(template_kwargs or {})
        self.name = name or self.model_path.name + (f"+{self.adapter_path.name}" if self.adapter_path else "")
        self.tokenizer, self.model = self._load(dtype)
        self._generation = Generation(self.model, self.tokenizer, seed=seed)

    def _load(self, dtype: str) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM

        from gapforge.serving.chat_format import load_tokenizer

        model_dir(self.model_path, "; set policy.local_path")
        tokenizer = load_tokenizer(self.model_path)  # the chat format training uses (no template: ServingError)
        self.tool_format = tool_format_of(tokenizer.chat_template)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype, local_files_only=True)
        if self.adapter_path is not None:
            adapter_dir(self.adapter_path)
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, self.adapter_path, is_trainable=False)
        model.eval()
        return tokenizer, model

    def render(self, messages: list[Message], tools: list[dict[str, Any]]) -> str:
        """The prompt text the model sees (chat template with tools and the generation prompt)."""
        return render_prompt(self.tokenizer, messages, tools, **self.template_kwargs)

    async def aclose(self) -> None:
        """Stop the generation worker (the weights go with the object)."""
        await asyncio.to_thread(self._generation.batcher.close)

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        temp = check_temperature(self.temperature if temperature is None else temperature)
        text = await self._generation.complete(
            self.render(messages, tools), position=len(messages), temperature=temp, max_new_tokens=self.max_new_tokens
        )
        # a broken tool call: MalformedOutputError with the raw text
        return parse_turn(text, self.tool_format, id_factory=call_ids(self.seed, len(messages)))
