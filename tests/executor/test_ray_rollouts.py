"""Rollout collection on Ray actors: the same episodes as the local collector, exact counts after a killed worker."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
from pathlib import Path

import pytest
from executor_helpers import episodes_by_key

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.config import PolicyConfig
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.registry import make_env
from gapforge.executor import ExecutorConfig, episode_player
from gapforge.executor.errors import EpisodeNotReturned, ExecutorUnavailable
from gapforge.store import Store
from gapforge.wiring import make_policy
from tests.fakes.fake_openai import FakeOpenAIServer, tool_call_message
from tests.fakes.locked_shop import LockedScoreShop

ROOT = Path(__file__).resolve().parents[2]
SHOP_POLICY = SHOP_POLICY_DIR
TASKS = ["shop-lookup-001", "shop-write-001", "shop-compound-001", "shop-refusal-001"]


def test_a_collection_on_ray_equals_the_local_one_episode_by_episode(ray_cluster, store: Store) -> None:
    pol = PolicyConfig(kind="local", local_path=str(SHOP_POLICY), temperature=1.0, max_new_tokens=48)
    plan = dict(env="shop", tasks=TASKS, samples=2, concurrency=4, max_turns=3, temperature=1.0)
    local_run, ray_run = store.create_run("rollouts", {}), store.create_run("rollouts", {})

    async def both() -> None:
        policy = make_policy(pol)
        await collect(
            CollectPlan(run_id=local_run, **plan), make_env=lambda: make_env("shop"), policy=policy, sink=store
        )
        cfg = ExecutorConfig(kind="ray", rollout_workers=2)
        async with episode_player(cfg, functools.partial(make_policy, pol), lambda: make_env("shop"), 4) as player:
            assert len(set(await player.pids())) == 2 and os.getpid() not in await player.pids()  # two worker processes
            res = await collect(
                CollectPlan(run_id=ray_run, **plan), make_env=None, policy=None, sink=store, player=player
            )
        assert (res.planned, res.ran) == (8, 8)

    asyncio.run(both())
    local, remote = episodes_by_key(store, local_run), episodes_by_key(store, ray_run)
    assert set(local) == set(remote) == {(t, s) for t in TASKS for s in range(2)}
    assert [remote[k] for k in sorted(local)] == [local[k] for k in sorted(local)]
    assert (
        len({str(v[0]) for v in local.values()}) > 1
    )  # sampling at temperature 1.0 really varied: not a vacuous equality


def test_a_worker_killed_mid_collection_still_ends_with_exact_counts(ray_cluster, store: Store) -> None:
    tasks = make_env("shop").task_ids()[:12]
    run_id = store.create_run("rollouts", {})
    plan = CollectPlan(run_id=run_id, env="shop", tasks=tasks, samples=2, concurrency=8, max_turns=3)
    answer = lambda _r: tool_call_message("find_customer_by_email", {"email": "x@example.com"})  # noqa: E731
    killed: list[int] = []

    with FakeOpenAIServer(answer, latency_s=0.1) as srv:
        pol = PolicyConfig(kind="endpoint")
        pol.endpoint.base_url, pol.endpoint.model, pol.endpoint.max_retries = srv.base_url, "fake", 0

        async def run() -> object:
            cfg = ExecutorConfig(kind="ray", rollout_workers=2, max_retries=2)
            async with episode_player(cfg, functools.partial(make_policy, pol), lambda: make_env("shop"), 8) as player:
                victim = (await player.pids())[0]
                stored = []

                def kill_after_four(ep) -> None:
                    stored.append(ep)
                    if len(stored) == 4:
                        os.kill(victim, signal.SIGKILL)  # mid-collection: that actor has episodes in flight
                        killed.append(victim)

                result = await collect(
                    plan, make_env=None, policy=None, sink=store, player=player, on_episode=kill_after_four
                )
                assert victim not in await player.pids()  # the actor was restarted in a new process
                return result

        result = asyncio.run(run())
    assert killed, "the worker was never killed"
    assert (result.planned, result.ran, result.stored_elsewhere, result.infra_failures) == (24, 24, 0, [])
    rows = store.episodes(run_id)
    keys = [(r.task_id, r.sample) for r in rows]
    assert len(keys) == 24 and set(keys) == set(plan.keys())  # exact count, no duplicates, none lost
    assert all(r.turns == 3 for r in rows)


def test_an_episode_a_ray_actor_cannot_send_back_is_blamed_on_the_env_in_one_line(ray_cluster, store: Store) -> None:
    pol = PolicyConfig(kind="local", local_path=str(SHOP_POLICY), temperature=1.0, max_new_tokens=16)
    plan = CollectPlan(
        run_id=store.create_run("rollouts", {}), env="shop", tasks=TASKS[:1], samples=1, concurrency=1, max_turns=1
    )

    async def run() -> None:
        cfg = ExecutorConfig(kind="ray", rollout_workers=1)
        async with episode_player(cfg, functools.partial(make_policy, pol), LockedScoreShop, 1) as player:
            await collect(plan, make_env=None, policy=None, sink=store, player=player)

    with pytest.raises(EpisodeNotReturned) as err:  # its score holds a lock: Ray's pickler refuses it
        asyncio.run(run())
    message = str(err.value)
    assert type(err.value) is EpisodeNotReturned and err.value.exit_code == 4  # the env's code, not Ray's wrapper
    assert "\n" not in message and "shop-lookup-001#0" in message and "Score.info" in message


def test_a_ray_worker_that_cannot_import_the_env_is_refused_in_one_line_not_retried_as_a_crash(
    ray_cluster, store: Store, tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "driver_only_env.py").write_text(
        "from gapforge.envs.registry import make_env\n\nclass DriverOnly:\n    def __call__(self):\n"
        "        return make_env('shop')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, on no Ray worker
    from driver_only_env import DriverOnly

    pol = PolicyConfig(kind="local", local_path=str(SHOP_POLICY), temperature=1.0, max_new_tokens=16)
    run_id = store.create_run("rollouts", {})
    plan = CollectPlan(run_id=run_id, env="shop", tasks=TASKS[:1], samples=1, concurrency=1, max_turns=1)

    async def run() -> None:
        cfg = ExecutorConfig(kind="ray", rollout_workers=1, max_retries=1)
        async with episode_player(cfg, functools.partial(make_policy, pol), DriverOnly(), 1) as player:
            await collect(plan, make_env=None, policy=None, sink=store, player=player)

    with pytest.raises(ExecutorUnavailable) as err:
        asyncio.run(run())
    message = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in message
    assert "No module named 'driver_only_env'" in message and "run the same command again" not in message
