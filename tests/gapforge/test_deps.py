"""The typed dependencies object: built in wiring, lazy store and pool, closes what it made;
config sections owned by layers with cross-field checks that say what to change."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gapforge.agents.deps import StageDeps
from gapforge.config import ConfigError, GapforgeConfig, load_config
from gapforge.sandbox.checks.settings import GRPOReadinessConfig
from gapforge.sandbox.config import SandboxConfig
from gapforge.store.config import StoreConfig
from gapforge.wiring import build_deps


class _Policy:
    name = "fake"

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def respond(self, messages, tools, *, temperature=None):  # pragma: no cover - not called
        raise AssertionError

    async def aclose(self) -> None:
        self.log.append("policy")


class _Closable:
    def __init__(self, log: list[str], what: str) -> None:
        self.log, self.what = log, what

    def close(self) -> None:
        self.log.append(self.what)


def test_build_deps_is_lazy_and_typed(config: GapforgeConfig) -> None:
    deps = build_deps(config)
    assert isinstance(deps, StageDeps) and deps.sandbox is config.sandbox and deps.readiness == config.grpo_readiness
    db = config.workspace / "gapforge.db"
    assert not db.exists(), "the store opens on first use only"
    run_id = deps.store.create_run("test", {})
    assert db.exists() and deps.store.get_run(run_id).kind == "test"
    deps.close()  # no pool was opened: no Docker needed


def test_deps_close_what_they_made_in_order() -> None:
    log: list[str] = []
    deps = StageDeps(
        open_store=lambda: _Closable(log, "store"),  # type: ignore[arg-type,return-value]
        open_pool=lambda: _Closable(log, "pool"),  # type: ignore[arg-type,return-value]
        policy_factory=lambda cfg: _Policy(log),  # type: ignore[arg-type,return-value]
        chat_model_factory=lambda role: role,  # type: ignore[arg-type,return-value]
    )
    assert deps.store is deps.store and deps.sandbox_pool is deps.sandbox_pool
    deps.make_policy()
    assert deps.make_chat_model("llm") == "llm"
    asyncio.run(deps.aclose())
    assert log == ["policy", "pool", "store"]
    deps.close()  # idempotent
    assert log == ["policy", "pool", "store"]


def test_layer_sections_compose_into_the_tree(workspace: Path) -> None:
    cfg = load_config(None, [f"workspace={workspace}", "sandbox.memory_mb=256", "grpo_readiness.groups=5"], environ={})
    assert isinstance(cfg.sandbox, SandboxConfig) and cfg.sandbox.memory_mb == 256
    assert isinstance(cfg.store, StoreConfig) and cfg.grpo_readiness.groups == 5


def test_readiness_bounds_must_be_ordered() -> None:
    with pytest.raises(
        ConfigError,
        match=r"grpo_readiness: .*mean_low \(0.9\) must be below mean_high \(0.5\)|mean_low \(0.9\) must be below mean_high",
    ):
        load_config(None, ["grpo_readiness.mean_low=0.9", "grpo_readiness.mean_high=0.5"], environ={})
    with pytest.raises(ValueError):
        GRPOReadinessConfig(samples=1)  # a group needs two samples to have a spread
    with pytest.raises(ConfigError, match="rollouts.concurrency"):
        load_config(None, ["rollouts.concurrency=0"], environ={})


def test_readiness_samples_at_the_training_temperature(workspace: Path) -> None:
    """Readiness measures the rollouts GRPO will sample: one key (training.temperature) sets both."""
    cfg = load_config(None, [f"workspace={workspace}", "training.temperature=0.7"], environ={})
    assert build_deps(cfg).readiness.temperature == 0.7
    with pytest.raises(ConfigError, match="unknown config key 'grpo_readiness.temperature'"):
        load_config(None, ["grpo_readiness.temperature=0.7"], environ={})


def test_the_base_policy_is_made_once_even_when_stages_ask_from_several_threads() -> None:
    import threading
    import time

    made: list[str] = []

    def slow_policy(cfg):  # noqa: ANN001, ANN202 - loading weights takes a while
        time.sleep(0.2)
        made.append("policy")
        return _Policy([])

    deps = StageDeps(
        open_store=lambda: None,
        open_pool=lambda: None,
        policy_factory=slow_policy,  # type: ignore[arg-type,return-value]
        chat_model_factory=lambda role: role,
    )  # type: ignore[arg-type,return-value]
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(deps.base_policy())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == ["policy"] and len({id(p) for p in got}) == 1
