"""Rollout and evaluation episodes on Ray actors (`executor.kind: ray`).

Each `RolloutWorker` actor (an async actor: `executor.rollout` resources each) builds its own policy
(`policy_factory()`: an endpoint client, or a local model loaded once per actor) and a fresh env per episode.
`RayEpisodePlayer` is the collector's `agents.rollouts.EpisodePlayer`: it sends each (task, sample) to the least
busy actor and hands the `EpisodeRecord` back; the driver's collector stays the store's one writer (keyed writes:
a retried episode is never stored twice). Each episode's time limit (`rollouts.episode_timeout_s`) is enforced on
the actor's loop (agents.episode); env calls run on daemon threads there, so one abandoned at the limit never holds
the actor.

Faults: an actor whose process dies is restarted and its unfinished calls re-run (`executor.max_retries` each); the
episode key seeds sampling, so a re-run plays the same episode. Past the retries the collection stops with
IncompleteStage (exit 3): what finished is stored, a resume plays the rest. An actor that cannot build its policy or
env factory (a module its node cannot import) is ExecutorUnavailable (exit 2), and an episode it cannot pickle back
EpisodeNotReturned (exit 4, the env's code), each in one line instead of Ray's traceback.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from gapforge.agents.errors import IncompleteStage
from gapforge.agents.rollouts import EpisodeRecord, play_episode
from gapforge.envs.env_threads import DaemonThreads
from gapforge.envs.protocol import PolicyModel, TargetEnvironment
from gapforge.executor.cluster import check_feasible, connect, options
from gapforge.executor.config import ExecutorConfig
from gapforge.executor.errors import EpisodeNotReturned, ExecutorUnavailable


class RolloutWorker:
    """The body of one Ray actor: a policy and an env factory, episodes played concurrently on its loop."""

    def __init__(
        self, policy_factory: Callable[[], PolicyModel], make_env: Callable[[], TargetEnvironment], threads: int
    ) -> None:
        self.policy = policy_factory()
        self.make_env = make_env
        self.pool = DaemonThreads("rollout-env")  # env calls: abandoned at an episode's time limit, never joined

    def pid(self) -> int:
        return os.getpid()

    async def play(
        self, task_id: str, sample: int, max_turns: int, temperature: float | None, timeout_s: float | None = None
    ) -> EpisodeRecord:
        # a task of its own: the episode key it sets stays in its own context
        record = await asyncio.create_task(
            play_episode(
                self.policy,
                self.make_env,
                task_id,
                sample,
                max_turns=max_turns,
                temperature=temperature,
                executor=self.pool,
                timeout_s=timeout_s,
            )
        )
        from ray import cloudpickle  # what Ray pickles the return with: failing there, the driver gets Ray's traceback

        try:
            cloudpickle.dumps(record)
        except Exception as e:
            raise EpisodeNotReturned.of(task_id, sample, e) from None
        return record

    async def aclose(self) -> None:
        close = getattr(self.policy, "aclose", None)
        if close is not None:
            await close()
        self.pool.shutdown(wait=False)


class RayEpisodePlayer:
    """Dispatches episodes to a fixed set of RolloutWorker actors, least busy first."""

    def __init__(self, ray: Any, actors: list[Any], max_retries: int) -> None:
        self.ray = ray
        self.actors = actors
        self.busy = [0] * len(actors)
        self.max_retries = max_retries

    async def play(
        self, task_id: str, sample: int, *, max_turns: int, temperature: float | None, timeout_s: float | None = None
    ) -> EpisodeRecord:
        i = min(range(len(self.actors)), key=self.busy.__getitem__)
        self.busy[i] += 1
        try:
            return await self.actors[i].play.remote(task_id, sample, max_turns, temperature, timeout_s)
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, EpisodeNotReturned):  # the env's fault, said in its own line, not Ray's traceback
                raise e.cause from None
            raise
        except self.ray.exceptions.RayActorError as e:
            if e.actor_init_failed:  # never started: a restart fails the same way, so no "run it again"
                raise ExecutorUnavailable(
                    f"a Ray rollout worker could not build its policy or env factory ({_last_line(e)}): check that both "
                    "load on every Ray node (the env's module importable there, the model path present)"
                ) from None
            raise IncompleteStage(
                f"Ray rollout worker {i} died more than executor.max_retries={self.max_retries} times "
                f"(last at {task_id}#{sample}: {str(e).splitlines()[0][:160]}); what finished is stored: "
                "run the same command again to play the rest"
            ) from None
        finally:
            self.busy[i] -= 1

    async def pids(self) -> list[int]:
        """The worker processes' ids (tests kill one)."""
        return list(await asyncio.gather(*(a.pid.remote() for a in self.actors)))

    async def aclose(self) -> None:
        closing = [a.aclose.remote() for a in self.actors]
        try:
            await asyncio.gather(*closing, return_exceptions=True)
        finally:
            for actor in self.actors:
                self.ray.kill(actor, no_restart=True)


def _last_line(err: BaseException) -> str:
    """The innermost error of Ray's traceback text (`ModuleNotFoundError: No module named 'x'`), colour codes removed."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(err)).splitlines() if line.strip()]
    return lines[-1][:200] if lines else type(err).__name__


@asynccontextmanager
async def ray_player(
    cfg: ExecutorConfig,
    policy_factory: Callable[[], PolicyModel],
    make_env: Callable[[], TargetEnvironment],
    concurrency: int,
) -> AsyncIterator[RayEpisodePlayer]:
    """`executor.rollout_workers` actors, each taking up to its share of `concurrency` episodes at once."""
    ray = await asyncio.to_thread(connect, cfg)
    opts = options(cfg, cfg.rollout)
    check_feasible(ray, opts, "executor.rollout")
    per_actor = max(1, -(-concurrency // cfg.rollout_workers))
    actor_cls = ray.remote(RolloutWorker)
    actors = [
        actor_cls.options(
            max_restarts=cfg.max_retries, max_task_retries=cfg.max_retries, max_concurrency=per_actor + 1, **opts
        ).remote(policy_factory, make_env, per_actor + 1)
        for _ in range(cfg.rollout_workers)
    ]
    player = RayEpisodePlayer(ray, actors, cfg.max_retries)
    try:
        yield player
    finally:
        await player.aclose()
