"""Rollout collection (DESIGN.md §1 step 1): run a policy on a target env's
tasks, K samples each, concurrently, and store every episode.

Idempotent per (run, env, task, sample): a re-run after a crash only runs what
the store does not hold yet. An episode ended by an infrastructure failure
(endpoint down after retries, sandbox lost: agents.episode.INFRA_TERMINATIONS)
is NOT stored: it is reported in `CollectResult.infra_failures` and a resume
runs it again, so an outage never becomes the model's record. Each episode gets a fresh env instance; episodes
are written as they finish, so a kill loses at most the ones in flight.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
from concurrent.futures import Executor, ThreadPoolExecutor
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from agents.episode import Rollout, call_env, run_episode
from envs.protocol import PolicyModel, TargetEnvironment
from envs.sampling import episode_key


class EpisodeSink(Protocol):
    """The part of store.Store the collector needs."""

    def episode_keys(self, run_id: str, env: str) -> set[tuple[str, int]]: ...

    def add_episode(self, run_id: str, env: str, task_id: str, sample: int, **fields: Any) -> int | None:
        """The new episode's id, or None when the key was already stored (e.g. by another process).
        A sink may also offer `add_episodes(run_id, env, [(task_id, sample, fields)]) -> [id | None]`
        (one transaction for many: the collector then commits episodes in groups)."""


class EpisodePlayer(Protocol):
    """Plays one episode somewhere else (e.g. executor/: a Ray actor holding its own policy and envs) and
    returns it; the collector stays the one writer of the sink. `aclose()` is the creator's to call."""

    async def play(self, task_id: str, sample: int, *, max_turns: int, temperature: float | None) -> Rollout: ...


@dataclass(frozen=True)
class CollectPlan:
    run_id: str
    env: str
    tasks: list[str]
    samples: int
    concurrency: int
    max_turns: int
    temperature: float | None = None

    def keys(self) -> list[tuple[str, int]]:
        return [(t, s) for t in self.tasks for s in range(self.samples)]


@dataclass(frozen=True)
class InfraFailure:
    """An episode the infrastructure ended (not stored; a resume redoes it)."""

    task_id: str
    sample: int
    termination: str
    error: str


@dataclass
class CollectResult:
    planned: int
    skipped: int  # already in the store when this call started
    ran: int  # stored by this call (never an episode another process stored meanwhile)
    episode_ids: list[int] = field(default_factory=list)
    infra_failures: list[InfraFailure] = field(default_factory=list)
    stored_elsewhere: int = 0  # played here, but its key was stored meanwhile by another process: not counted in `ran`

    @property
    def complete(self) -> bool:
        return not self.infra_failures

    def infra_counts(self) -> Counter[str]:
        return Counter(f.termination for f in self.infra_failures)


def episode_fields(ep: Rollout, task_family: str | None) -> dict[str, Any]:
    """Store columns of one episode."""
    return {
        "policy": ep.policy,
        "messages": [m.model_dump(mode="json") for m in ep.messages],
        "reward": ep.reward,
        "success": ep.success,
        "components": ep.components,
        "termination": ep.termination,
        "error": ep.error,
        "turns": ep.turns,
        "timings": ep.timings,
        "task_family": task_family,
        "score_info": ep.score_info,
        "step_info": ep.step_info,
        "user_prompt": ep.user_prompt,
        "started_at": ep.started_at,
    }


class GroupWriter:
    """Writes finished episodes with group commit: while one write is in flight, the episodes that finish
    meanwhile queue up and go together in the next transaction (`sink.add_episodes`, one fence check and
    one commit for all; a sink without it gets one `add_episode` each). Each caller still gets its own
    answer (the new id, or None when its key was stored elsewhere) once its episode is stored."""

    MAX_BATCH = 256  # rows per transaction (a sink may put them in one statement: SQLite caps its variables)

    def __init__(self, sink: EpisodeSink, run_id: str, env: str, blocking: Callable[..., Any]) -> None:
        self.sink, self.run_id, self.env, self.blocking = sink, run_id, env, blocking
        self.pending: list[tuple[tuple[str, int, dict[str, Any]], asyncio.Future[int | None]]] = []
        self.flushing = False
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps only weak references to tasks

    async def add(self, task_id: str, sample: int, fields: dict[str, Any]) -> int | None:
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.pending.append(((task_id, sample, fields), done))
        if not self.flushing:
            self.flushing = True
            self._task = asyncio.get_running_loop().create_task(self._flush())
        return await done

    async def _flush(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending[: self.MAX_BATCH], self.pending[self.MAX_BATCH:]
                items = [item for item, _ in batch]
                try:
                    many = getattr(self.sink, "add_episodes", None)
                    if many is not None:
                        ids = await self.blocking(many, self.run_id, self.env, items)
                    else:
                        ids = [await self.blocking(self.sink.add_episode, self.run_id, self.env, t, s, **f) for t, s, f in items]
                except BaseException as e:  # e.g. store.fencing.LeaseLost: every waiter of this batch sees it
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(e)
                    continue
                for (_, done), eid in zip(batch, ids):
                    if not done.done():
                        done.set_result(eid)
        finally:
            self.flushing = False


async def play_episode(
    policy: PolicyModel, make_env: Callable[[], TargetEnvironment], task_id: str, sample: int, *, max_turns: int,
    temperature: float | None, executor: Executor,
) -> Rollout:
    """One episode of (task, sample) on a fresh env, closed after; blocking env calls on `executor` (an `inline`
    env's on the loop: `call_env`, as run_episode makes them). Sets
    `episode_key` to `<task>#<sample>` in the calling task's context: a local policy seeds from it, so the
    episode samples the same tokens wherever and with whatever else it is played."""
    episode_key.set(f"{task_id}#{sample}")
    loop = asyncio.get_running_loop()
    env = await loop.run_in_executor(executor, make_env)
    try:
        return await run_episode(policy, env, task_id, max_turns=max_turns, temperature=temperature, executor=executor)
    finally:
        await call_env(env, executor, env.close)


async def collect(
    plan: CollectPlan,
    *,
    make_env: Callable[[], TargetEnvironment],
    policy: PolicyModel,
    sink: EpisodeSink,
    on_episode: Callable[[Rollout], None] | None = None,
    families: dict[str, str] | None = None,
    result: CollectResult | None = None,
    player: EpisodePlayer | None = None,
) -> CollectResult:
    """Run every (task, sample) of the plan that the sink does not hold yet.

    `result`, when given, is filled in place (and returned), so a caller still knows what this call
    stored when the collection is stopped by an exception (e.g. store.fencing.LeaseLost).
    Blocking calls (env construction, env calls, store writes) run on a thread pool
    of `plan.concurrency` workers, so `concurrency` blocking envs (tau2, the sandbox,
    an LLM user) really run at once (asyncio's default executor caps at cpu+4).
    The policy is the caller's: collect never closes it. With a `player` (executor/: Ray workers that
    hold their own policy and envs) the episodes are played there and only written here; `make_env`
    and `policy` then go unused.
    """
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=plan.concurrency + 1, thread_name_prefix="rollout") as pool:

        async def blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))

        done = await blocking(sink.episode_keys, plan.run_id, plan.env)
        todo = [k for k in plan.keys() if k not in done]
        if result is None:
            result = CollectResult(planned=0, skipped=0, ran=0)
        result.planned, result.skipped = len(plan.keys()), len(plan.keys()) - len(todo)
        gate = asyncio.Semaphore(plan.concurrency)
        fams = families or {}
        writer = GroupWriter(sink, plan.run_id, plan.env, blocking)

        async def one(task_id: str, sample: int) -> None:
            async with gate:
                if player is not None:
                    ep = await player.play(task_id, sample, max_turns=plan.max_turns, temperature=plan.temperature)
                else:
                    ep = await play_episode(policy, make_env, task_id, sample, max_turns=plan.max_turns,
                                            temperature=plan.temperature, executor=pool)
                if ep.infrastructure_failure:
                    result.infra_failures.append(InfraFailure(task_id, sample, ep.termination, ep.error or ""))
                else:
                    eid = await writer.add(task_id, sample, episode_fields(ep, fams.get(task_id)))
                    if eid is None:
                        result.stored_elsewhere += 1
                    else:
                        result.ran += 1
                        result.episode_ids.append(eid)
            if on_episode is not None:
                on_episode(ep)

        tasks = [asyncio.create_task(one(t, s)) for t, s in todo]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return result


@dataclass(frozen=True)
class FamilySummary:
    family: str
    episodes: int
    passed: int
    mean_reward: float
    mean_turns: float

    @property
    def pass_rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0


@dataclass(frozen=True)
class RolloutSummary:
    """A run's episodes summarised (stage service result; the CLI and the demo render it)."""

    run_id: str
    env: str | None
    episodes: int
    families: list[FamilySummary]
    terminations: Counter[str]

    @property
    def pass_rate(self) -> float:
        return sum(f.passed for f in self.families) / self.episodes if self.episodes else 0.0


class SummarySource(Protocol):
    """The part of store.Store the summary needs (no trajectories are loaded)."""

    def episode_summaries(self, run_id: str, env: str | None = None, success: bool | None = None) -> list[Any]: ...


def rollout_summary(store: SummarySource, run_id: str, env: str | None = None) -> RolloutSummary:
    """Pass rate / reward / turns per task family and the terminations of a run (never prints)."""
    rows = store.episode_summaries(run_id, env=env)
    families, terminations = summarize(rows)
    return RolloutSummary(run_id=run_id, env=env, episodes=len(rows), families=families, terminations=terminations)


def summarize(rows: list[Any]) -> tuple[list[FamilySummary], Counter[str]]:
    """Pass rate / reward / turns per task family, and terminations, from stored episode rows."""
    by_family: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_family[r.task_family or r.env].append(r)
    out = []
    for fam in sorted(by_family):
        eps = by_family[fam]
        out.append(
            FamilySummary(
                family=fam,
                episodes=len(eps),
                passed=sum(1 for e in eps if e.success),
                mean_reward=statistics.fmean(e.reward for e in eps),
                mean_turns=statistics.fmean(e.turns for e in eps),
            )
        )
    return out, Counter(r.termination for r in rows)
