"""A local rollout worker process that stops answering (its event loop frozen) ends its episode as a `timeout`
on the worker (an infrastructure failure: not stored), is killed once its episodes are accounted for, and a fresh
worker takes its place; the other episodes go on."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path

import pytest

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.envs.protocol import Message
from gapforge.envs.registry import make_env
from gapforge.envs.sampling import episode_key
from gapforge.executor import processes
from gapforge.executor.processes import process_pool
from gapforge.store import Store

FROZEN_TASK = "shop-lookup-001"


class FreezingPolicy:
    """Blocks its worker's whole event loop on the frozen task (a call holding the loop forever); else says goodbye."""

    name = "freezer"

    async def respond(self, messages: list[Message], tools: list[dict], *, temperature: float | None = None) -> Message:
        if episode_key.get().startswith(f"{FROZEN_TASK}#"):
            threading.Event().wait()  # never returns: the worker is killed
        return Message.assistant(content="Goodbye.")


def _shop():
    return make_env("shop")


def test_a_frozen_worker_times_out_its_episode_and_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "WORKER_GRACE_S", 0.5)
    probe = make_env("shop")
    other = next(t for t in probe.task_ids() if t != FROZEN_TASK)
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")

    async def play() -> tuple:
        async with process_pool(2, 1) as pool:
            before = pool.pids()
            player = pool.player(functools.partial(FreezingPolicy), _shop)
            plan = CollectPlan(
                run_id=store.create_run("rollouts", {}),
                env="shop",
                tasks=[FROZEN_TASK, other],
                samples=1,
                concurrency=2,
                max_turns=1,
                episode_timeout_s=0.5,
            )
            first = await asyncio.wait_for(collect(plan, make_env=None, policy=None, sink=store, player=player), 120)
            after = pool.pids()
            more = CollectPlan(
                run_id=plan.run_id,
                env="shop",
                tasks=[other],
                samples=3,
                concurrency=2,
                max_turns=1,
                episode_timeout_s=0.5,
            )
            second = await asyncio.wait_for(collect(more, make_env=None, policy=None, sink=store, player=player), 120)
            return first, second, before, after, pool.recycled

    try:
        first, second, before, after, recycled = asyncio.run(play())
    finally:
        store.close()
    assert first.ran == 1 and len(first.infra_failures) == 1 and not first.timeouts
    lost = first.infra_failures[0]
    assert lost.task_id == FROZEN_TASK and lost.termination == "timeout"
    assert "waiting on a local rollout worker process (worker" in lost.error and "0.5 s" in lost.error
    assert recycled == 1 and len(set(after) - set(before)) == 1  # one worker killed and replaced
    assert (second.skipped, second.ran, second.infra_failures) == (1, 2, [])  # the pool goes on serving
