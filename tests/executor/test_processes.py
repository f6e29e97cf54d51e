"""Episodes on local worker processes (executor/processes.py): the same episodes as the collector's own loop,
a worker killed mid-collection costs only the episodes sent to it (replaced; a resume plays them, exact counts),
workers that keep dying stop the stage resumably, errors come back with their type."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from executor_helpers import (
    assert_same_evaluation,
    episodes_by_key,
    evaluate_each,
    sorted_episodes,
)

from gapforge.agents.errors import IncompleteStage
from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.config import PolicyConfig
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env
from gapforge.executor import ExecutorConfig, episode_player, processes
from gapforge.executor.errors import EpisodeNotReturned
from gapforge.executor.processes import WorkerLost, picklable, process_pool
from gapforge.store import Store
from gapforge.wiring import make_policy
from tests.fakes.locked_shop import LockedScoreShop

ROOT = Path(__file__).resolve().parents[2]
SHOP_POLICY = SHOP_POLICY_DIR
TASKS = ["shop-lookup-001", "shop-write-001", "shop-compound-001", "shop-refusal-001"]
shop = functools.partial(make_env, "shop")


class SlowLookupPolicy:
    """Looks a customer up every turn after a short wait (picklable: a worker process builds it)."""

    name = "slow-lookup"

    def __init__(self, delay_s: float = 0.05, fail_on: str | None = None) -> None:
        self.delay_s, self.fail_on = delay_s, fail_on

    async def respond(self, messages: list[Message], tools: list[dict], *, temperature: float | None = None) -> Message:
        await asyncio.sleep(self.delay_s)
        if self.fail_on is not None and any(self.fail_on in (m.content or "") for m in messages):
            raise ValueError(f"policy crashed on {self.fail_on!r}")
        call = ToolCall(id=f"call_{len(messages)}", name="find_customer_by_email", arguments={"email": "x@example.com"})
        return Message(role="assistant", content=None, tool_calls=[call])


class BrokenOnArrival:
    """Pickles here, but cannot be rebuilt in the worker (its state refuses to load)."""

    def __init__(self) -> None:
        self.env_name = "shop"

    def __call__(self) -> Any:
        return make_env("shop")

    def __setstate__(self, state: Any) -> None:
        raise RuntimeError("this env factory refuses to load in another process")


@pytest.mark.slow  # two processes load the taught policy
def test_a_collection_on_worker_processes_equals_the_one_on_the_loop(store: Store) -> None:
    pol = PolicyConfig(kind="local", local_path=str(SHOP_POLICY), temperature=1.0, max_new_tokens=48)
    plan = {"env": "shop", "tasks": TASKS, "samples": 2, "concurrency": 4, "max_turns": 3, "temperature": 1.0}
    here, there = store.create_run("rollouts", {}), store.create_run("rollouts", {})

    async def both() -> None:
        policy = make_policy(pol)
        await collect(CollectPlan(run_id=here, **plan), make_env=shop, policy=policy, sink=store)
        await policy.aclose()
        async with episode_player(
            ExecutorConfig(), functools.partial(make_policy, pol), shop, 4, local_workers=2, threads=1
        ) as player:
            res = await collect(
                CollectPlan(run_id=there, **plan), make_env=None, policy=None, sink=store, player=player
            )
            pids = player.pool.pids()
        assert (res.planned, res.ran) == (8, 8)
        assert len(set(pids)) == 2 and os.getpid() not in pids  # really two other processes

    asyncio.run(both())
    local, remote = episodes_by_key(store, here), episodes_by_key(store, there)
    assert set(local) == set(remote) == {(t, s) for t in TASKS for s in range(2)}
    assert [remote[k] for k in sorted(local)] == [local[k] for k in sorted(local)]
    assert (
        len({str(v[0]) for v in local.values()}) > 1
    )  # sampling at temperature 1.0 really varied: not a vacuous equality


def test_a_worker_killed_mid_collection_costs_its_episodes_only_and_the_rerun_ends_exact(store: Store) -> None:
    tasks = shop().task_ids()[:12]
    run_id = store.create_run("rollouts", {})
    plan = CollectPlan(run_id=run_id, env="shop", tasks=tasks, samples=2, concurrency=8, max_turns=3)
    factory = functools.partial(SlowLookupPolicy, 0.05)

    async def first() -> tuple[Any, list[int], list[int], int]:
        async with process_pool(2, 1) as pool:
            before = pool.pids()
            victim = before[0]
            seen: list[Any] = []

            def kill_after_four(ep: Any) -> None:
                seen.append(ep)
                if len(seen) == 4:
                    os.kill(victim, signal.SIGKILL)  # mid-collection: that worker has episodes in flight

            res = await asyncio.wait_for(
                collect(
                    plan,
                    make_env=None,
                    policy=None,
                    sink=store,
                    player=pool.player(factory, shop),
                    on_episode=kill_after_four,
                ),
                120,
            )
            return res, before, pool.pids(), pool.restarts

    res, before, after, restarts = asyncio.run(first())
    lost = res.infra_failures
    assert lost and all(f.termination == "worker_error" for f in lost)  # episodes sent to it, and only those
    # each lost episode is the victim's: in flight when it died, or sent to it before its closed pipe was read (a
    # loaded host widens that window)
    victim_said = (f"(pid {before[0]}) ended", f"(pid {before[0]}) cannot be reached")
    assert all(any(s in f.error for s in victim_said) for f in lost) and not res.timeouts
    assert res.ran + len(lost) == 24 and len(store.episodes(run_id)) == res.ran  # every other planned episode is stored
    assert restarts == 1 and victim_replaced(before, after)
    assert dict(res.infra_counts()) == {"worker_error": len(lost)}

    async def rerun() -> Any:
        async with process_pool(2, 1) as pool:
            return await collect(plan, make_env=None, policy=None, sink=store, player=pool.player(factory, shop))

    result = asyncio.run(rerun())
    assert (result.planned, result.skipped, result.ran) == (24, 24 - len(lost), len(lost))  # a resume plays only those
    keys = [(r.task_id, r.sample) for r in store.episodes(run_id)]
    assert len(keys) == 24 and set(keys) == set(plan.keys())  # exact count, no duplicates, none lost
    assert all(r.turns == 3 for r in store.episodes(run_id))


def victim_replaced(before: list[int], after: list[int]) -> bool:
    return before[0] not in after and before[1] in after and len(set(after) - set(before)) == 1


class DiesMidEpisode(SlowLookupPolicy):
    """Kills its own worker process at its second answer: an episode is in flight on that worker by construction."""

    def __init__(self) -> None:
        super().__init__(0.05)
        self.answers = 0

    async def respond(self, messages: list[Message], tools: list[dict], *, temperature: float | None = None) -> Message:
        self.answers += 1
        if self.answers == 2 and multiprocessing.parent_process() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().respond(messages, tools, temperature=temperature)


class DiesOnLoad:
    """A policy whose loading kills its worker process (a native crash, an out-of-memory kill): every worker dies."""

    name = "dies-on-load"

    def __init__(self) -> None:
        if multiprocessing.parent_process() is not None:  # in a worker, never in the test's own process
            os._exit(9)


def test_workers_that_keep_dying_stop_the_stage_with_worker_lost(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    async def play(factory: Any) -> None:
        async with process_pool(1, 1) as pool:
            plan = CollectPlan(
                run_id=store.create_run("rollouts", {}), env="shop", tasks=TASKS, samples=1, concurrency=2, max_turns=3
            )
            await asyncio.wait_for(
                collect(plan, make_env=None, policy=None, sink=store, player=pool.player(factory, shop)), 120
            )

    # the first worker dies loading the policy (its 2 episodes in flight end as worker_error), its replacement dies
    # the same way before it started an episode (the next 2): another one would too
    with pytest.raises(WorkerLost, match="died itself before it started an episode"):
        asyncio.run(play(DiesOnLoad))
    # past MAX_WORKER_RESTARTS replacements in one pool (here none allowed): the next death stops the stage
    monkeypatch.setattr(processes, "MAX_WORKER_RESTARTS", 0)
    with pytest.raises(
        IncompleteStage, match="local rollout worker .* ended .* workers keep dying .*MAX_WORKER_RESTARTS"
    ):
        asyncio.run(play(DiesMidEpisode))


def test_an_episode_error_and_a_policy_that_cannot_load_come_back_with_their_type(store: Store, tmp_path: Path) -> None:
    async def play(factory: Any) -> None:
        async with process_pool(1, 1) as pool:
            plan = CollectPlan(
                run_id=store.create_run("rollouts", {}),
                env="shop",
                tasks=TASKS[:2],
                samples=1,
                concurrency=2,
                max_turns=2,
            )
            await collect(plan, make_env=None, policy=None, sink=store, player=pool.player(factory, shop))

    with pytest.raises(ValueError, match="policy crashed on"):  # the policy's own error, not a lost worker
        asyncio.run(play(functools.partial(SlowLookupPolicy, 0.0, fail_on="")))
    missing = PolicyConfig(kind="local", local_path=str(tmp_path / "absent"))
    with pytest.raises(Exception, match="is not a directory: point it at a Hugging Face model folder"):
        asyncio.run(play(functools.partial(make_policy, missing)))


def test_a_factory_that_cannot_travel_plays_on_the_loop() -> None:
    assert picklable(functools.partial(SlowLookupPolicy, 0.1), shop)
    assert not picklable(lambda: SlowLookupPolicy())

    async def which(factory: Any) -> Any:
        async with episode_player(ExecutorConfig(), factory, shop, 4, local_workers=2, threads=1) as player:
            return player

    assert asyncio.run(which(lambda: SlowLookupPolicy())) is None
    assert type(asyncio.run(which(functools.partial(SlowLookupPolicy, 0.1)))).__name__ == "ProcessPlayer"


@pytest.mark.slow  # worker processes load a tiny model and two adapters
def test_an_evaluation_on_worker_processes_stores_the_loop_s_episodes_metrics_and_routing(
    tiny_model_dir: Path, tmp_path_factory, tmp_path: Path
) -> None:
    from router_helpers import OpeningsScorer, capability_specs, random_adapter, shared_taught_model

    from gapforge.agents.router import Router, RoutingConfig, make_options
    from gapforge.evaluation.policies import standard_policies
    from gapforge.executor.evaluation import local_eval_players, recipe
    from gapforge.serving.multi_adapter import MultiAdapterModel

    taught = shared_taught_model(tmp_path_factory, tiny_model_dir)
    caps = capability_specs()
    paths = {c["name"]: random_adapter(taught, tmp_path / c["name"], seed=20 + i) for i, c in enumerate(caps)}
    backend = MultiAdapterModel(taught, paths, max_new_tokens=8, seed=0)
    openings = [
        ["Hi, I want to cancel my order, I don't need it anymore."],
        ["Please add up the totals of my invoices."],
    ]
    router = Router(make_options(caps, RoutingConfig().labels), OpeningsScorer(openings, min_similarity=0.5))
    tasks = ["shop-refusal-001", "shop-lookup-001"]  # routed to the first adapter / kept on the base (reused episodes)
    store = Store(f"sqlite:///{tmp_path / 'gapforge.db'}")
    runs = {where: store.create_run("trace", {"env": "shop"}) for where in ("loop", "workers")}
    played = ("base", "trace_routed", f"adapter:{caps[0]['name']}", "capability_hints")

    async def both() -> dict:
        base = recipe(
            taught,
            paths,
            caps,
            list(paths),
            temperature=1.0,
            max_new_tokens=8,
            seed=0,
            worker_dir=str(tmp_path / "w"),
            ship=False,
        )
        async with local_eval_players(base, shop, 2, 1) as players:
            routed = standard_policies(backend, router, caps, temperature=1.0, capability_adapters=list(paths))[
                "trace_routed"
            ]
            async with players("trace_routed", routed) as player:
                assert player is None  # the routed policy plays on the driver: its decisions are recorded there
            out = await evaluate_each(
                store, runs, backend, router, caps, list(paths), played, tasks, shop, players, "workers"
            )
        await backend.aclose()
        return out

    results = asyncio.run(both())
    assert_same_evaluation(
        store, runs, results, played, ("pass_rate", "mean_reward", "vs_base_paired", "routing", "reused_base_tasks")
    )
    routing = results["workers"].get("trace_routed").metrics["routing"]
    assert routing["shop-refusal-001"]["adapter"] == caps[0]["adapter"] and not routing["shop-lookup-001"]["adapter"]
    # the routed policy copies the adapter's episodes of the task it routes there (evaluation.reuse), and what the
    # workers played for that adapter is what the driver's own loop played
    routed = sorted_episodes(store, runs["workers"], "trace_routed")
    in_loop = sorted_episodes(store, runs["loop"], played[2])
    assert {e.policy for e in routed if e.task_id == "shop-refusal-001"} == {played[2]}
    assert [e.messages for e in routed if e.task_id == "shop-refusal-001"] == [
        e.messages for e in in_loop if e.task_id == "shop-refusal-001"
    ]
    store.close()


def test_what_cannot_travel_fails_its_episode_with_a_message_and_nothing_hangs(store: Store) -> None:
    async def play(make: Any) -> None:
        async with process_pool(1, 1) as pool:
            plan = CollectPlan(
                run_id=store.create_run("rollouts", {}),
                env="shop",
                tasks=TASKS[:2],
                samples=1,
                concurrency=2,
                max_turns=1,
            )
            await asyncio.wait_for(
                collect(
                    plan,
                    make_env=None,
                    policy=None,
                    sink=store,
                    player=pool.player(functools.partial(SlowLookupPolicy, 0.0), make),
                ),
                timeout=120,
            )

    with pytest.raises(EpisodeNotReturned, match="could not be sent back from its worker") as err:  # holds a lock
        asyncio.run(play(LockedScoreShop))
    assert err.value.exit_code == 4 and "Score.info" in str(err.value)  # blamed on the env's code, saying what to fix
    with pytest.raises(
        RuntimeError, match="could not be rebuilt in a rollout worker: this env factory refuses to load"
    ):
        asyncio.run(play(BrokenOnArrival()))
