"""Forwarding to a vLLM server started with multi-LoRA, for the routed endpoint.

vLLM (0.33) serves LoRA adapters under names: `--enable-lora --max-loras N --max-lora-rank R --lora-modules
name=path`, or at runtime with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and POST /v1/load_lora_adapter. vLLM caches an
adapter by its name, so each adapter is served under a VERSIONED name `<adapter>-<content hash>`: a retrained adapter
gets a new name and can never hit a stale cache. `respond(..., adapter=None)` asks for the base model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import aiohttp

from gapforge.envs.protocol import Message
from gapforge.serving.errors import ServingError, adapter_dir
from gapforge.serving.multi_adapter import AdapterPolicy, capped
from gapforge.serving.openai_policy import EndpointPolicy

LOADED = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")  # what PEFT and vLLM read


def adapter_version(path: str | Path) -> str:
    """12 hex digits of sha256 over the adapter files vLLM loads (LOADED: names + bytes); a model card or manifest
    beside them does not change the name."""
    root = adapter_dir(path)
    digest = hashlib.sha256()
    for f in sorted(p for p in root.iterdir() if p.is_file() and p.name in LOADED):
        digest.update(str(f.relative_to(root)).encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


class VLLMBackend:
    def __init__(
        self,
        base_url: str,
        base_model: str,
        adapters: dict[str, str | Path],
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 2,
        max_new_tokens: int = 512,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = base_model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.paths = {k: Path(v) for k, v in adapters.items()}
        self.served = {k: f"{k}-{adapter_version(p)}" for k, p in self.paths.items()}
        self.max_new_tokens = max_new_tokens
        self._policies: dict[str | None, EndpointPolicy] = {}
        self._max_retries = max_retries

    @property
    def adapters(self) -> list[str]:
        return list(self.paths)

    def lora_modules_args(self) -> list[str]:
        """The `vllm serve` arguments that register every adapter under its versioned name at start-up."""
        return ["--enable-lora", "--lora-modules", *(f"{self.served[k]}={self.paths[k].resolve()}" for k in self.paths)]

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def ensure_registered(self) -> list[str]:
        """Load at runtime every versioned adapter the server does not list yet; returns the names loaded."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        loaded: list[str] = []
        async with aiohttp.ClientSession(timeout=timeout, headers=self._headers()) as session:
            try:
                async with session.get(f"{self.base_url}/models") as resp:
                    listed = {m["id"] for m in (await resp.json()).get("data", [])}
            except aiohttp.ClientError as e:
                raise ServingError(
                    f"vLLM server {self.base_url} unreachable ({type(e).__name__}): start it or fix the URL"
                ) from None
            for adapter, served in self.served.items():
                if served in listed:
                    continue
                body = {"lora_name": served, "lora_path": str(self.paths[adapter].resolve())}
                async with session.post(f"{self.base_url}/load_lora_adapter", json=body) as resp:
                    if resp.status != 200:
                        text = (await resp.text())[:200]
                        raise ServingError(
                            f"vLLM refused adapter '{served}' ({resp.status}: {text}): start vLLM with --enable-lora and "
                            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or pass lora_modules_args() at start-up"
                        )
                loaded.append(served)
        return loaded

    def _policy(self, adapter: str | None) -> EndpointPolicy:
        if adapter is not None and adapter not in self.served:
            raise ServingError(f"unknown adapter '{adapter}': known adapters are {', '.join(self.served) or 'none'}")
        if adapter not in self._policies:
            model = self.served[adapter] if adapter is not None else self.name
            self._policies[adapter] = EndpointPolicy(
                self.base_url,
                model,
                api_key=self.api_key,
                max_tokens=self.max_new_tokens,
                timeout_s=self.timeout_s,
                max_retries=self._max_retries,
            )
        return self._policies[adapter]

    async def respond(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        adapter: str | None = None,
        temperature: float = 0.0,
        max_new_tokens: int | None = None,
    ) -> Message:
        """max_new_tokens: the request's limit, bounded by this backend's `max_new_tokens` (the config's)."""
        limit = capped(max_new_tokens, self.max_new_tokens)
        return await self._policy(adapter).respond(messages, tools, temperature=temperature, max_tokens=limit)

    def policy(self, adapter: str | None, *, temperature: float = 1.0, name: str | None = None) -> AdapterPolicy:
        """An `envs.protocol.PolicyModel` view bound to one adapter (or the base), as MultiAdapterModel.policy."""
        self._policy(adapter)  # unknown adapter -> ServingError now
        return AdapterPolicy(self, adapter, temperature, name or (adapter or self.name))

    async def aclose(self) -> None:
        for p in self._policies.values():
            await p.aclose()
        self._policies.clear()
