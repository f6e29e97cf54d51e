"""StageDeps: the one typed dependencies object stage services and graph nodes receive.

Built by the composition root (`gapforge.wiring.build_deps(cfg)`), passed to graph
nodes through LangGraph's runtime context, so graph/ never constructs Docker or SQL
objects. The store and the sandbox pool open lazily on first use (a command that
needs neither creates no database file and starts no container). Whoever holds the
StageDeps closes it: `close()` / `aclose()` release, in order, every policy made
through `make_policy`, the sandbox pool and the store.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.config import PolicyConfig, RolloutConfig
from sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds
from sandbox.config import SandboxConfig

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from envs.protocol import PolicyModel
    from sandbox.pool import SandboxPool
    from store import Store


@dataclass
class StageDeps:
    """What a stage needs from the outside world, chosen once in the composition root."""

    open_store: Callable[[], Store]
    open_pool: Callable[[], SandboxPool]
    policy_factory: Callable[[PolicyConfig | None], PolicyModel]
    chat_model_factory: Callable[[str], BaseChatModel]
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    rollouts: RolloutConfig = field(default_factory=RolloutConfig)
    readiness: GRPOReadinessConfig = field(default_factory=GRPOReadinessConfig)
    self_test: SelfTestThresholds = field(default_factory=SelfTestThresholds)
    _store: Store | None = field(default=None, init=False, repr=False)
    _pool: SandboxPool | None = field(default=None, init=False, repr=False)
    _policies: list[Any] = field(default_factory=list, init=False, repr=False)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self.open_store()
        return self._store

    @property
    def sandbox_pool(self) -> SandboxPool:
        if self._pool is None:
            self._pool = self.open_pool()
        return self._pool

    def make_policy(self, cfg: PolicyConfig | None = None) -> PolicyModel:
        """A policy for `cfg` (default: the configured one); closed by `close()`/`aclose()`."""
        policy = self.policy_factory(cfg)
        self._policies.append(policy)
        return policy

    def make_chat_model(self, role: str = "llm") -> BaseChatModel:
        """The chat model of an LLM role (`llm` = the analyst/generator/reviewer endpoint)."""
        return self.chat_model_factory(role)

    async def aclose_policies(self) -> None:
        """Close the policies made here (their HTTP sessions belong to the running loop)."""
        policies, self._policies = self._policies, []
        for policy in policies:
            aclose = getattr(policy, "aclose", None)
            if aclose is not None:
                result = aclose()
                if inspect.isawaitable(result):
                    await result

    def close(self) -> None:
        if self._policies:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(self.aclose_policies())
            else:  # inside a loop: the owner must await aclose() instead
                raise RuntimeError("StageDeps.close() called inside an event loop: await deps.aclose()")
        self._close_resources()

    async def aclose(self) -> None:
        await self.aclose_policies()
        await asyncio.to_thread(self._close_resources)

    def _close_resources(self) -> None:
        pool, self._pool = self._pool, None
        store, self._store = self._store, None
        try:
            if pool is not None:
                pool.close()
        finally:
            if store is not None:
                store.close()

    def __enter__(self) -> StageDeps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
