"""Rollout collection (the method's first step): a policy on a target env's tasks, K samples each, concurrently,
every episode stored as it finishes (a kill loses at most the ones in flight), each on a fresh env instance.

Idempotent per (run, env, task, sample): a re-run only plays what the store lacks. An episode ended by the
infrastructure (endpoint down past its retries, sandbox lost: envs.errors.INFRA_TERMINATIONS) is NOT stored but
reported in `CollectResult.infra_failures`, so an outage never becomes the model's record; a resume plays it.

Every episode has a time limit (`CollectPlan.episode_timeout_s`, env construction to score: agents/episode.py).
A `timeout` is never stored: waiting on the env's own code it is in `CollectResult.timeouts`, on the policy, sandbox
or a worker process it is an infrastructure failure. The env's failures (stored `env_error` episodes, timeouts on
the env) cost their episodes only, up to `max_env_failure_share` of the planned episodes; past it the collection
stops with `EnvFailureShare` (exit 4, naming the env and its last error). With `replay_env_errors` (every collection
of a run's target) a resume first deletes the run's `env_error` episodes, before its analysis starts, and replays them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Protocol

from gapforge.agents.config import DEFAULT_EPISODE_TIMEOUT_S
from gapforge.agents.episode import EpisodeRecord, TimedOut, bounded, call_env, empty_episode, run_episode, timed_out
from gapforge.envs.env_threads import DaemonThreads, runs_inline
from gapforge.envs.protocol import PolicyModel, TargetEnvironment
from gapforge.envs.sampling import episode_key
from gapforge.faults import EndpointFault, EnvCodeFault, GapforgeError, Resumable

if TYPE_CHECKING:
    from gapforge.store import Store

log = logging.getLogger(__name__)


class EnvFailureShare(Resumable, EnvCodeFault):
    """More episodes failed in the env's own code (exceptions, calls that never returned) than
    `rollouts.max_env_failure_share` allows. Blamed on the env (exit 4, not the infrastructure's 3): fix its code,
    then resume, which plays the failed episodes again (`CollectPlan.replay_env_errors`)."""

    resume_wording = (
        ": fix the env's code, then `{}` plays the failed and unplayed episodes again",
        ": fix the env's code, then resume (the failed and unplayed episodes are played again)",
    )

    def __init__(self, message: str, *, resume: str | None = None) -> None:
        super().__init__(self._resumable(message, resume))


class EpisodeSink(Protocol):
    """The part of store.Store the collector needs. A sink may also offer `add_episodes(run_id, env,
    [(task_id, sample, fields)]) -> [id | None]` (one transaction for many: episodes are then committed in groups)."""

    def episode_keys(self, run_id: str, env: str) -> set[tuple[str, int]]: ...

    def add_episode(self, run_id: str, env: str, task_id: str, sample: int, **fields: Any) -> int | None:
        """The new episode's id, or None when the key was already stored (e.g. by another process)."""


class EpisodePlayer(Protocol):
    """Plays one episode somewhere else (executor/: a Ray actor holding its own policy and envs) and returns it;
    the collector stays the one writer of the sink. `aclose()` is the creator's to call."""

    async def play(
        self, task_id: str, sample: int, *, max_turns: int, temperature: float | None, timeout_s: float | None = None
    ) -> EpisodeRecord: ...


@dataclass(frozen=True)
class CollectPlan:
    run_id: str
    env: str
    tasks: list[str]
    samples: int
    concurrency: int
    max_turns: int
    temperature: float | None = None
    episode_timeout_s: float | None = DEFAULT_EPISODE_TIMEOUT_S  # None: no limit
    max_env_failure_share: float = 1.0  # 1.0: env failures never stop the collection
    replay_env_errors: bool = False  # first delete the stored `env_error` episodes and play them again
    task_samples: Mapping[str, int] = field(default_factory=dict)  # task -> its own sample count instead of `samples`

    def keys(self) -> list[tuple[str, int]]:
        return [(t, s) for t in self.tasks for s in range(self.task_samples.get(t, self.samples))]


@dataclass(frozen=True)
class InfraFailure:
    """An episode the infrastructure ended, or one past its time limit (not stored; a resume redoes it)."""

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
    timeouts: list[InfraFailure] = field(default_factory=list)  # past the time limit in the env's code: not stored
    env_errors: int = 0  # stored `env_error` episodes of this call
    first_env_error: InfraFailure | None = None  # the first of them (task, sample, error), for the warning line
    replayed: int = 0  # `env_error` episodes of earlier calls deleted to be played again
    in_flight: dict[tuple[str, int], float] = field(default_factory=dict)  # (task, sample) -> monotonic start

    @property
    def finished(self) -> int:
        """Planned episodes accounted for so far: stored (before or now, here or elsewhere), failed or timed out."""
        return self.skipped + self.ran + self.stored_elsewhere + len(self.infra_failures) + len(self.timeouts)

    def heartbeat(self, limit_s: float | None = None) -> str:
        """One line on how far the collection is, naming the episode running longest (a hang shows there)."""
        line = f"{self.finished}/{self.planned} episodes finished, {len(self.in_flight)} running"
        if self.in_flight:
            (task, sample), started = min(self.in_flight.items(), key=lambda kv: kv[1])
            limit = f" of its {limit_s:g} s limit" if limit_s else ""
            line += f" (longest: {task}#{sample}, {time.monotonic() - started:.0f} s{limit})"
        return line

    @property
    def complete(self) -> bool:
        """Every planned episode is stored."""
        return not self.infra_failures and not self.timeouts

    @property
    def env_failures(self) -> int:
        """Episodes of this call the env's own code failed: stored env errors and timeouts on the env."""
        return self.env_errors + len(self.timeouts)

    def infra_counts(self) -> Counter[str]:
        return Counter(f.termination for f in self.infra_failures)


_COLUMNS = ("policy", "messages", "reward", "success", "components", "termination", "error", "turns", "timings")


def episode_fields(ep: EpisodeRecord, task_family: str | None) -> dict[str, Any]:
    """Store columns of one episode."""
    return {
        **{k: getattr(ep, k) for k in _COLUMNS},
        "messages": [m.model_dump(mode="json") for m in ep.messages],
        "task_family": task_family,
        **{k: getattr(ep, k) for k in ("score_info", "step_info", "user_prompt", "started_at")},
    }


class GroupWriter:
    """Group commit: while one write is in flight, the episodes that finish meanwhile queue up and go together in the
    next transaction (`sink.add_episodes`: one fence check and commit for all; else one `add_episode` each). Each
    caller still gets its own answer (the new id, or None when its key was stored elsewhere) once it is stored."""

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
                batch, self.pending = self.pending[: self.MAX_BATCH], self.pending[self.MAX_BATCH :]
                items = [item for item, _ in batch]
                try:
                    many = getattr(self.sink, "add_episodes", None)
                    if many is not None:
                        ids = await self.blocking(many, self.run_id, self.env, items)
                    else:
                        add = self.sink.add_episode
                        ids = [await self.blocking(add, self.run_id, self.env, t, s, **f) for t, s, f in items]
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
    policy: PolicyModel,
    make_env: Callable[[], TargetEnvironment],
    task_id: str,
    sample: int,
    *,
    max_turns: int,
    temperature: float | None,
    executor: Executor | None,
    timeout_s: float | None = None,
    env_name: str = "",
) -> EpisodeRecord:
    """One episode of (task, sample) on a fresh env, closed after; blocking env calls (building the env among them)
    on `executor` (an `inline` built-in env's on the loop, as run_episode makes them). `timeout_s` counts from the
    start of the env's construction. Sets `episode_key` to `<task>#<sample>` in the calling task's context: a local
    policy seeds from it, so the episode samples the same tokens wherever it is played. A constructor that raises or
    does not return in time ends only this episode (`env_error` / `timeout`, named `env_name`); an env built after the
    deadline is closed when it arrives. A constructor's infrastructure failure (gapforge.faults `infrastructure`) is
    `endpoint_error` (an endpoint's) or `sandbox_error` (any other): never stored. A timed-out episode's env is closed
    in the background, never waited for (its close is often stuck behind the abandoned call)."""
    episode_key.set(f"{task_id}#{sample}")
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    started_at, t0 = datetime.now(timezone.utc), time.perf_counter()
    building, name = _Construction(make_env), getattr(policy, "name", "")
    try:
        env = await bounded(loop.run_in_executor(executor, building.build), deadline, "make_env", "env")
    except TimedOut as e:
        assert timeout_s is not None
        building.abandon()
        elapsed = time.perf_counter() - t0
        return timed_out(env_name, task_id, name, e.call, e.boundary, timeout_s, started_at, elapsed, env_name or None)
    except Exception as e:  # noqa: BLE001 - the env's constructor failed for this episode: its boundary, the others go on
        elapsed = time.perf_counter() - t0
        termination, what = "env_error", "building the env failed"
        if isinstance(e, GapforgeError) and e.infrastructure:  # not the env's code: not stored, a resume redoes it
            termination = "endpoint_error" if isinstance(e, EndpointFault) else "sandbox_error"
            what = f"building the env failed on the {e.boundary} (infrastructure)"
        error = f"{what}: {type(e).__name__}: {e}"
        return empty_episode(env_name, task_id, name, started_at, elapsed, termination=termination, error=error)
    ep: EpisodeRecord | None = None
    try:
        limits = {"max_turns": max_turns, "temperature": temperature, "timeout_s": timeout_s, "deadline": deadline}
        ep = await run_episode(policy, env, task_id, executor=executor, **limits)
        return ep
    finally:
        if ep is not None and ep.termination == "timeout" and not runs_inline(env):
            close_in_background(env)
        else:
            await close_env(env, executor, timeout_s)


class _Construction:
    """`make_env()` on a thread the episode may stop waiting for: an env built after `abandon()` is closed."""

    def __init__(self, make_env: Callable[[], TargetEnvironment]) -> None:
        self.make_env, self.lock = make_env, threading.Lock()
        self.abandoned = False
        self.env: TargetEnvironment | None = None  # once built

    def build(self) -> TargetEnvironment:
        env = self.make_env()
        with self.lock:
            late, self.env = self.abandoned, env
        if late:  # nobody will run an episode on it: close it here, on the thread that built it
            close_quietly(env)
        return env

    def abandon(self) -> None:
        """The episode stopped waiting: the env is closed once built (at once when it arrived meanwhile)."""
        with self.lock:
            self.abandoned, env = True, self.env
        if env is not None:
            close_in_background(env)


def close_quietly(env: Any) -> None:
    """`env.close()`, a failure logged (never an episode's end)."""
    try:
        env.close()
    except Exception as e:  # noqa: BLE001 - a broken env's close must not hide its episode
        log.warning("closing env %s failed: %s: %s", getattr(env, "name", "?"), type(e).__name__, e)


def close_in_background(env: Any) -> None:
    """`env.close()` on a daemon thread nobody waits for: an env whose call was abandoned at the time limit is often
    stuck in its close too, and neither its episode's slot nor its worker process's answer (executor/processes.py
    waits only `WORKER_GRACE_S` past the limit, then blames the worker) may wait a second time limit for it."""
    threading.Thread(target=close_quietly, args=(env,), name="env-close", daemon=True).start()


async def close_env(env: Any, executor: Executor | None, timeout_s: float | None) -> None:
    """`env.close()`, waited for at most `timeout_s` (an env stuck in an abandoned call may never close); a close
    that raises or does not return is logged, never the episode's end."""
    if runs_inline(env):
        close_quietly(env)
        return
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        await bounded(call_env(env, executor, close_quietly, env), deadline, "env.close", "env")
    except TimedOut:
        log.warning("env %s did not close within %g s: its close() was abandoned", getattr(env, "name", "?"), timeout_s)


async def collect(
    plan: CollectPlan,
    *,
    make_env: Callable[[], TargetEnvironment],
    policy: PolicyModel,
    sink: EpisodeSink,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    families: dict[str, str] | None = None,
    result: CollectResult | None = None,
    player: EpisodePlayer | None = None,
) -> CollectResult:
    """Run every (task, sample) of the plan that the sink does not hold yet. `result`, when given, is filled in place
    (and returned): a caller still knows what this call stored when an exception stops it (store.fencing.LeaseLost,
    EnvFailureShare). Env construction and calls run on daemon threads (envs.env_threads: a call abandoned at the time
    limit never holds the process at exit), at most `plan.concurrency` episodes at once; store writes on a thread of
    their own. The policy is the caller's (never closed here). With a `player` (executor/: worker processes or Ray
    actors holding their own policy and envs) episodes are played there and only written here."""
    loop = asyncio.get_running_loop()
    env_threads = DaemonThreads("rollout-env")
    result = result if result is not None else CollectResult(planned=0, skipped=0, ran=0)
    fams = families or {}
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-store") as store_thread:

            async def blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
                return await loop.run_in_executor(store_thread, functools.partial(fn, *args, **kwargs))

            drop = getattr(sink, "drop_env_errors", None)
            if plan.replay_env_errors and drop is not None:  # the env's failures say nothing about the policy
                result.replayed = len(await blocking(drop, plan.run_id, plan.env))
            done = await blocking(sink.episode_keys, plan.run_id, plan.env)
            todo = [k for k in plan.keys() if k not in done]
            result.planned, result.skipped = len(plan.keys()), len(plan.keys()) - len(todo)
            gate = asyncio.Semaphore(plan.concurrency)
            writer = GroupWriter(sink, plan.run_id, plan.env, blocking)
            allowed = plan.max_env_failure_share * len(
                plan.keys()
            )  # of the planned: a resume of a few is not judged alone
            limits = {"max_turns": plan.max_turns, "temperature": plan.temperature, "timeout_s": plan.episode_timeout_s}

            async def one(task_id: str, sample: int) -> None:
                async with gate:
                    result.in_flight[(task_id, sample)] = time.monotonic()
                    try:
                        if player is not None:
                            ep = await player.play(task_id, sample, **limits)
                        else:
                            ep = await play_episode(
                                policy, make_env, task_id, sample, executor=env_threads, env_name=plan.env, **limits
                            )
                    finally:
                        result.in_flight.pop((task_id, sample), None)
                    failure = InfraFailure(task_id, sample, ep.termination, ep.error or "")
                    if ep.infrastructure_failure:
                        result.infra_failures.append(failure)
                    elif not ep.final:  # a timeout on the env's own code: not stored, a resume plays it again
                        result.timeouts.append(failure)
                    else:
                        eid = await writer.add(task_id, sample, episode_fields(ep, fams.get(task_id)))
                        if eid is None:
                            result.stored_elsewhere += 1
                        else:
                            result.ran += 1
                            result.episode_ids.append(eid)
                            if ep.termination == "env_error":
                                result.env_errors += 1
                                result.first_env_error = result.first_env_error or failure
                if on_episode is not None:
                    on_episode(ep)
                if ep.env_failure and result.env_failures > allowed:
                    raise EnvFailureShare(env_failure_line(plan, result, ep))

            tasks = [asyncio.create_task(one(t, s)) for t, s in todo]
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            return result
    finally:
        env_threads.shutdown(wait=False)


def env_failure_line(plan: CollectPlan, result: CollectResult, last: EpisodeRecord) -> str:
    """One line: the env, how many episodes it failed in this call (of the plan's) and how, the limit, the last error."""
    kinds = ", ".join(f"{k}={v}" for k, v in (("env_error", result.env_errors), ("timeout", len(result.timeouts))) if v)
    detail = (last.error or "no detail").splitlines()[0][:300]
    return (
        f"env '{plan.env}' failed {result.env_failures} of the {len(plan.keys())} planned episodes ({kinds}), more than "
        f"rollouts.max_env_failure_share={plan.max_env_failure_share:g} allows; last: {detail}; what finished is stored"
    )


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


def rollout_summary(store: Store, run_id: str, env: str | None = None) -> RolloutSummary:
    """Pass rate / reward / turns per task family and the terminations of a run (never prints; loads no trajectory)."""
    rows = store.episode_summaries(run_id, env=env)
    families, terminations = summarize(rows)
    return RolloutSummary(run_id=run_id, env=env, episodes=len(rows), families=families, terminations=terminations)


def summarize(rows: list[Any]) -> tuple[list[FamilySummary], Counter[str]]:
    """Pass rate / reward / turns per task family, and terminations, from stored episode rows."""
    by_family: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_family[r.task_family or r.env].append(r)
    out = [
        FamilySummary(
            fam,
            len(eps),
            sum(1 for e in eps if e.success),
            statistics.fmean(e.reward for e in eps),
            statistics.fmean(e.turns for e in eps),
        )
        for fam, eps in sorted(by_family.items())
    ]
    return out, Counter(r.termination for r in rows)
