"""StageDeps: the one typed dependencies object every stage service receives.

Built by the composition root (`gapforge.wiring.build_deps(cfg)`) and held by the
stage bindings (`gapforge/stages/`); graph/ never sees it (it gets the stage
bindings only). It owns every lifetime a stage needs: the store and the sandbox
pool open lazily on first use (a command that needs neither creates no database
file and starts no container), the base policy is loaded once and shared by
rollouts and GRPO readiness, chat models are made per role. Whoever holds the
StageDeps closes it: `close()` / `aclose()` release, in order, every policy made
here, the sandbox pool and the store.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.agents.config import PolicyConfig, RolloutConfig
from gapforge.agents.synthesis.config import SynthesisConfig
from gapforge.sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds
from gapforge.sandbox.config import SandboxConfig
from gapforge.store.workspace import Workspace

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from gapforge.envs.protocol import PolicyModel
    from gapforge.sandbox.pool import SandboxPool
    from gapforge.store import Store


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
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    synthesis: SynthesisConfig = field(default_factory=SynthesisConfig)
    workspace: Workspace = field(default_factory=lambda: Workspace(Path(".gapforge")))
    episode_runner: Callable[..., Any] | None = (
        None  # GRPO readiness episodes (default: the policy loop, rollouts.max_turns)
    )
    # agents.validation.SandboxChecks: readiness on local worker processes, or every check on a Ray Docker node (None: all here)
    sandbox_checks: Any = None
    unseen_env: str | None = None  # evaluation.unseen_env: its openings are held out too (check `contamination`)
    _store: Store | None = field(default=None, init=False, repr=False)
    _pool: SandboxPool | None = field(default=None, init=False, repr=False)
    _policies: list[Any] = field(default_factory=list, init=False, repr=False)
    _base: PolicyModel | None = field(default=None, init=False, repr=False)
    _chat: dict[str, BaseChatModel] = field(default_factory=dict, init=False, repr=False)
    _making: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False
    )  # stages ask from worker threads

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

    def base_policy(self) -> PolicyModel:
        """The configured base policy, made once (its weights load once) and shared by every stage."""
        with self._making:  # one policy even when two capability branches ask at once (and one import of its backend)
            if self._base is None:
                self._base = self.make_policy()
            return self._base

    def readiness_policy(self) -> PolicyModel | None:
        """The policy GRPO readiness measures: the base policy when it can train (endpoint | local), else None."""
        return None if self.policy.kind == "scripted" else self.base_policy()

    def make_chat_model(self, role: str = "llm") -> BaseChatModel:
        """The chat model of an LLM role (`llm`: analyst / user simulator; `synthesis`: generator and
        reviewer; `policy`), made once per role."""
        with self._making:
            if role not in self._chat:
                self._chat[role] = self.chat_model_factory(role)
            return self._chat[role]

    async def aclose_policies(self) -> None:
        """Close the policies made here (their HTTP sessions belong to the running loop)."""
        policies, self._policies, self._base = self._policies, [], None
        for policy in policies:
            aclose = getattr(policy, "aclose", None)
            if aclose is not None:
                result = aclose()
                if inspect.isawaitable(result):
                    await result

    async def aclose_pool(self) -> None:
        """Close the sandbox pool only (a caller that lent its store keeps it open)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close)

    def close(self) -> None:
        if self._policies:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(self.aclose_policies())
            else:  # inside a loop: the owner must await aclose() instead
                raise RuntimeError("StageDeps.close() called inside an event loop: await deps.aclose()")
        self._close_resources()

    async def aclose(self, *, store: bool = True) -> None:
        """`store=False`: the store stays open (a caller lent it: `gapforge.stages.stage_context`)."""
        await self.aclose_policies()
        await asyncio.to_thread(self._close_resources, store)

    def _close_resources(self, close_store: bool = True) -> None:
        pool, self._pool = self._pool, None
        store, self._store = (self._store, None) if close_store else (None, self._store)
        try:
            if pool is not None:
                pool.close()
            close_checks = getattr(
                self.sandbox_checks, "close", None
            )  # local readiness workers (executor/validation.py)
            if close_checks is not None:
                close_checks()
        finally:
            if store is not None:
                store.close()

    def __enter__(self) -> StageDeps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
