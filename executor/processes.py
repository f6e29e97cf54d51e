"""Episodes on local worker processes (`executor.kind: local` with a policy whose weights load in-process).

A small model decoding on CPU keeps about one core busy per Python process (the GIL and per-layer overhead, not the
matmuls, bound it), so the collector's own loop leaves the other cores idle. `process_pool(workers, threads)` starts
spawned processes that each build their own copy of a policy (from a picklable factory, once per factory) and play
episodes concurrently on their own loop, like the Ray actors of executor/rollouts.py without a cluster:
`pool.player(factory, make_env)` is one policy's `agents.rollouts.EpisodePlayer`, and one pool serves every policy
of an evaluation. The driver stays the store's one writer (a worker returns the `EpisodeRecord`). Episodes seed
from their key (`envs/sampling.py`), so the same plan stores the same episodes here, on the driver or on Ray
(tests/executor/test_processes.py).

Faults: a worker that dies (killed, out of memory, a native crash) costs only the episodes sent to it and not yet
answered (in flight, or sent as it died, before its closed pipe was read): each ends as `worker_error` (an
infrastructure failure on the `worker` boundary: not stored, a resume plays it) and a fresh worker takes its place
(`pool.restarts`). Workers that keep dying stop the stage with WorkerLost (an IncompleteStage, exit 3):
past `MAX_WORKER_RESTARTS` replacements in one pool, or when a replacement dies before it started an episode (its
policy cannot even load). An episode's exception is re-raised on the driver with its type when it pickles (else a
RuntimeError with its type, message and the worker's traceback); an episode whose env put something that does not
pickle in it stops the stage with EpisodeNotReturned (the env's code, exit 4). What crosses a pipe is pickled by its
sender and unpickled by its receiver inside a try, so what does not travel fails that episode with a message instead
of hanging the stage or killing the worker. Requests to one worker go in order (the first one of a policy carries its factory).
A worker dies with the driver (PR_SET_PDEATHSIG, and its pipe's end-of-file).

Time limits: the worker's loop enforces each episode's limit (agents.episode: a stuck env call ends it as `timeout`).
A worker that does not answer within the limit plus `WORKER_GRACE_S` (a policy decoding forever, a C call holding
the GIL) is not waited on: that episode is a `timeout` on the `worker` boundary (not stored, a resume plays it), the
worker gets no new episode, and once its other episodes are settled it is killed and replaced.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

from gapforge.agents.episode import empty_episode, timed_out
from gapforge.agents.errors import IncompleteStage
from gapforge.agents.rollouts import EpisodeRecord, play_episode
from gapforge.envs.env_threads import DaemonThreads
from gapforge.executor.errors import EpisodeNotReturned
from gapforge.faults import ResumableStop

log = logging.getLogger(__name__)
WORKER_GRACE_S = 5.0  # past an episode's time limit, how long the driver still waits for a worker's answer
MAX_WORKER_RESTARTS = 3  # workers that died replaced in one pool; the next death stops the stage (WorkerLost)


class WorkerLost(IncompleteStage):
    """Local rollout worker processes keep ending (killed, out of memory, crashed): past the pool's restarts."""


class _Died(ResumableStop):
    """The worker playing an episode ended (its pool replaced it): that episode is a `worker_error` (never raised
    past `ProcessPool.play`)."""


def picklable(*objects: Any) -> bool:
    """Whether the objects can travel to a spawned process (a factory holding a live client cannot)."""
    try:
        pickle.dumps(objects)
    except Exception:  # noqa: BLE001 - any pickling failure means: play in this process
        return False
    return True


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pipe's EOF still ends the worker
        pass


def _error_blob(err: BaseException) -> bytes:
    """The exception pickled, if it survives the round trip; else a RuntimeError with its type, message and traceback."""
    try:
        blob = pickle.dumps(err)
        pickle.loads(blob)
        return blob
    except Exception:  # noqa: BLE001
        trace = "".join(traceback.format_exception(err)).strip()
        return pickle.dumps(RuntimeError(f"{type(err).__name__}: {err} (in a rollout worker process)\n{trace}"))


def init_worker(threads: int | None) -> None:
    """A worker process's start: it dies with the driver and decodes on `threads` torch threads."""
    _die_with_parent()
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import torch

        torch.set_num_threads(threads)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the driver already showed its own "Loading weights"
    except ImportError:
        pass


def _worker_main(conn: Any, threads: int | None) -> None:
    init_worker(threads)
    asyncio.run(_serve(conn))


async def _serve(conn: Any) -> None:
    """Requests: (id, policy key, pickled factory or None, pickled make_env or None, task, sample, max_turns,
    temperature, timeout_s); None stops. Replies: (id, ok, pickled EpisodeRecord or exception)."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="worker-io")  # the pipe and policy builds
    env_threads = DaemonThreads("worker-env")  # env calls: abandoned at an episode's time limit
    send_lock = threading.Lock()
    envs: dict[str, Any] = {}  # key -> make_env
    env_errors: dict[str, Exception] = {}  # key -> why its make_env's bytes did not unpickle here
    building: dict[str, asyncio.Future[Any]] = {}
    running: set[asyncio.Task[None]] = set()

    def send(message: Any) -> None:
        with send_lock:
            conn.send(message)

    def build(blob: bytes) -> Any:
        from gapforge.serving.batching import model_loading

        with model_loading():  # policies built while others decode (an evaluation's policies play at once)
            return pickle.loads(blob)()

    async def one(req_id: int, key: str, task_id: str, sample: int, *limits: Any) -> None:
        max_turns, temperature, timeout_s = limits
        try:
            if key in env_errors:
                raise RuntimeError(f"the env factory could not be rebuilt in a rollout worker: {env_errors[key]}")
            if key not in building or key not in envs:
                raise RuntimeError(f"policy {key!r} was never sent to this worker")
            make_env = envs[key]
            policy = await building[key]  # built once per key, by the first request that carried its factory
            # started: the driver's clock for this episode runs
            await loop.run_in_executor(pool, send, (req_id, None, b""))
            rollout = await play_episode(
                policy,
                make_env,
                task_id,
                sample,
                max_turns=max_turns,
                temperature=temperature,
                executor=env_threads,
                timeout_s=timeout_s,
            )
            try:
                reply: tuple[Any, ...] = (req_id, True, pickle.dumps(rollout))
            except Exception as e:  # something the env put in the episode does not pickle
                raise EpisodeNotReturned.of(task_id, sample, e) from e
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - the episode's error goes back to the driver
            reply = (req_id, False, _error_blob(e))
        try:
            await loop.run_in_executor(pool, send, reply)
        except OSError:  # the driver is gone: nobody to tell
            pass

    try:
        while True:
            try:
                request = await loop.run_in_executor(pool, conn.recv)
            except (EOFError, OSError):  # the driver is gone
                break
            if request is None:
                break
            req_id, key, factory, make_env, *episode = request
            if factory is not None and key not in building:
                building[key] = loop.run_in_executor(pool, build, factory)
            if make_env is not None:
                try:
                    envs[key] = pickle.loads(make_env)
                except Exception as e:  # noqa: BLE001 - the episodes of this key will say so
                    env_errors[key] = e
            task = asyncio.create_task(one(req_id, key, *episode))
            running.add(task)
            task.add_done_callback(running.discard)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    finally:
        for future in building.values():
            built = future.done() and not future.cancelled() and future.exception() is None
            close = getattr(future.result() if built else None, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception as e:  # noqa: BLE001
                    log.warning("closing a worker's policy failed: %s", e)
        pool.shutdown(wait=False, cancel_futures=True)
        env_threads.shutdown(wait=False)


class _Worker:
    def __init__(self, ctx: Any, index: int, threads: int | None) -> None:
        self.index = index
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker_main, args=(child, threads), name=f"gapforge-rollout-{index}", daemon=True
        )
        self.process.start()
        child.close()
        self.pending: dict[int, asyncio.Future[EpisodeRecord]] = {}
        self.known: set[str] = set()  # policy keys whose factory this worker was sent
        self.send_lock = threading.Lock()  # the pipe's writers: the loop's sends and close()
        self.order: asyncio.Lock | None = (
            None  # FIFO on the loop: requests reach the worker in the order they were made
        )
        self.lost: str | None = None
        # why it gets no new episode (it stopped answering): recycled once its pending are settled
        self.stuck: str | None = None
        self.begun: dict[int, asyncio.Future[bool]] = {}  # request -> True once the worker started it (False: never)
        # episodes it said it started (a replacement that dies before its first one: its policy kills it)
        self.started = 0
        self.replacement = False  # it took the place of a worker that died

    def send(self, message: Any) -> None:
        with self.send_lock:
            self.conn.send(message)


class ProcessPool:
    """`workers` local processes playing episodes; `player(factory, make_env)` is one policy's EpisodePlayer."""

    def __init__(self, workers: int, threads: int | None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.ctx = multiprocessing.get_context("spawn")  # never fork a process that holds threads and torch state
        self.threads = threads
        self.workers = [_Worker(self.ctx, i, threads) for i in range(workers)]
        self.recycled = 0  # workers killed and replaced because they stopped answering
        self.restarts = 0  # workers that died and were replaced (at most MAX_WORKER_RESTARTS)
        self.closing = False  # close() has begun: a worker that ends now is not replaced
        self.ids = itertools.count()
        self.keys = itertools.count()
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        for w in self.workers:
            self._listen(w)

    def _listen(self, w: _Worker) -> None:
        w.order = asyncio.Lock()
        threading.Thread(target=self._read, args=(w,), name=f"gapforge-rollout-reader-{w.index}", daemon=True).start()

    def _replace(self, w: _Worker) -> _Worker:
        fresh = self.workers[w.index] = _Worker(self.ctx, w.index, self.threads)
        self._listen(fresh)
        return fresh

    def _recycle(self, w: _Worker) -> None:
        """Kill a worker that stopped answering (its pending episodes are settled) and start a fresh one in its place."""
        if self.workers[w.index] is not w:
            return
        fresh = self._replace(w)
        self.recycled += 1
        log.warning(
            "local rollout worker %d (pid %s) stopped answering (%s): killed, worker pid %s takes its place",
            w.index,
            w.process.pid,
            w.stuck,
            fresh.process.pid,
        )
        w.process.kill()
        threading.Thread(target=w.process.join, name=f"gapforge-rollout-reap-{w.index}", daemon=True).start()

    def _read(self, w: _Worker) -> None:
        assert self.loop is not None
        while True:
            try:
                req_id, ok, blob = w.conn.recv()
            except (EOFError, OSError):
                break
            if ok is None:  # the worker started playing this episode
                self.loop.call_soon_threadsafe(self._begin, w, req_id)
                continue
            try:
                payload = pickle.loads(blob)
            except Exception as e:  # noqa: BLE001 - a reply this process cannot rebuild: that episode fails, the others go on
                ok = False
                payload = RuntimeError(
                    f"the reply of rollout worker {w.index} could not be read here: {type(e).__name__}: {e}"
                )
            self.loop.call_soon_threadsafe(self._resolve, w, req_id, ok, payload)
        w.process.join(1.0)  # the pipe closed: reap it here (not on the loop), so _lose can name its exit code
        self.loop.call_soon_threadsafe(self._lose, w)

    @staticmethod
    def _begin(w: _Worker, req_id: int) -> None:
        w.started += 1
        waiter = w.begun.get(req_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    @staticmethod
    def _give_up(w: _Worker) -> None:
        """A stuck worker's episodes that never started will not: they end as timeouts too (not stored, played again)."""
        for waiter in w.begun.values():
            if not waiter.done():
                waiter.set_result(False)

    @staticmethod
    def _resolve(w: _Worker, req_id: int, ok: bool, payload: Any) -> None:
        future = w.pending.pop(req_id, None)
        if future is None or future.done():
            return
        if ok:
            future.set_result(payload)
        else:
            future.set_exception(payload)

    def _lose(self, w: _Worker) -> None:
        """A worker's pipe closed: it ended. Replaced (its episodes in flight become `worker_error`s) unless the pool
        is closing, it was already recycled, or workers keep dying (then its episodes fail with WorkerLost)."""
        code = w.process.exitcode
        w.lost = f"exit code {code}" if code is not None else "its pipe closed"
        current = self.workers[w.index] is w and not self.closing
        stop: str | None = None
        if current and w.replacement and w.started == 0 and w.pending:
            stop = "it replaced a worker that died, and died itself before it started an episode"
        elif current and self.restarts >= MAX_WORKER_RESTARTS:
            stop = f"{self.restarts} worker(s) already died and were replaced in this pool (MAX_WORKER_RESTARTS)"
        if current and stop is None:
            fresh = self._replace(w)
            fresh.replacement = True
            self.restarts += 1
            log.warning(
                "local rollout worker %d (pid %s) ended (%s) with %d episode(s) in flight: they end as worker_error "
                "(played again by a resume), worker pid %s takes its place",
                w.index,
                w.process.pid,
                w.lost,
                len(w.pending),
                fresh.process.pid,
            )
        ended = f"local rollout worker {w.index} (pid {w.process.pid}) ended ({w.lost})"
        for req_id, future in list(w.pending.items()):
            if future.done():
                continue
            if stop is None:
                future.set_exception(_Died(f"{ended} with this episode in flight"))
            else:
                future.set_exception(
                    WorkerLost(
                        f"{ended} with episode #{req_id} in flight, and workers keep dying ({stop}); what finished is "
                        "stored: run the same command again to play the rest (or set executor.local_rollout_workers=1)"
                    )
                )
        w.pending.clear()
        self._give_up(w)

    def player(self, factory: Callable[[], Any], make_env: Callable[[], Any]) -> ProcessPlayer:
        """One policy's EpisodePlayer; TypeError here when the factory or make_env cannot be pickled (check `picklable`)."""
        try:
            blobs = (pickle.dumps(factory), pickle.dumps(make_env))
        except Exception as e:
            raise TypeError(
                f"the policy factory or env factory cannot be sent to a worker process ({e}): play on the loop"
            ) from e
        return ProcessPlayer(self, f"policy-{next(self.keys)}", *blobs)

    async def play(
        self,
        key: str,
        factory: bytes,
        make_env: bytes,
        task_id: str,
        sample: int,
        *,
        max_turns: int,
        temperature: float | None,
        timeout_s: float | None = None,
    ) -> EpisodeRecord:
        assert self.loop is not None, "start() the pool first"
        live = [w for w in self.workers if w.lost is None and w.stuck is None] or [
            w for w in self.workers if w.lost is None
        ]
        if not live:
            raise WorkerLost(
                "every local rollout worker has ended; what finished is stored: run the same command again "
                "(or set executor.local_rollout_workers=1)"
            )
        w = min(live, key=lambda x: len(x.pending))
        req_id = next(self.ids)
        future: asyncio.Future[EpisodeRecord] = self.loop.create_future()
        w.pending[req_id] = future
        w.begun[req_id] = self.loop.create_future()
        if w.stuck is not None:
            self._give_up(w)
        try:
            assert w.order is not None
            async with w.order:
                blobs = (None, None) if key in w.known else (factory, make_env)
                request = (req_id, key, *blobs, task_id, sample, max_turns, temperature, timeout_s)
                try:
                    await asyncio.to_thread(w.send, request)
                except (OSError, ValueError) as e:  # its pipe is closed: the worker is gone (its reader replaces it)
                    if not future.done():
                        future.set_exception(
                            _Died(f"local rollout worker {w.index} (pid {w.process.pid}) cannot be reached ({e})")
                        )
                else:
                    w.known.add(key)
            started, t0 = datetime.now(timezone.utc), time.perf_counter()
            try:
                if timeout_s is None:
                    return await future
                begun = w.begun[req_id]  # the clock runs from the episode's start in the worker (not its warm-up)
                await asyncio.wait({future, begun}, return_when=asyncio.FIRST_COMPLETED)
                if not future.done() and begun.result():
                    try:
                        return await asyncio.wait_for(asyncio.shield(future), timeout_s + WORKER_GRACE_S)
                    except TimeoutError:
                        w.stuck = (
                            f"no answer to episode {task_id}#{sample} within {timeout_s:g} s + {WORKER_GRACE_S:g} s"
                        )
                        self._give_up(w)
                if future.done():
                    return future.result()
            except _Died as e:
                # an infrastructure failure (not stored): `worker_error`
                info = {"worker": {"index": w.index, "pid": w.process.pid, "ended": w.lost}}
                error = f"worker_error: {e}; it is not stored and a resume plays it again"
                elapsed = time.perf_counter() - t0
                return empty_episode(
                    "", task_id, key, started, elapsed, termination="worker_error", error=error, score_info=info
                )
            where = f"worker {w.index}, pid {w.process.pid}"
            elapsed = time.perf_counter() - t0
            return timed_out("", task_id, key, "the worker's episode", "worker", timeout_s, started, elapsed, where)
        finally:
            w.begun.pop(req_id, None)
            if not future.done():
                future.cancel()  # the caller stopped waiting (cancelled, or past the limit): a late reply is dropped
            w.pending.pop(req_id, None)
            if w.stuck is not None and not w.pending and w.lost is None:
                self._recycle(w)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process.pid is not None]

    def close(self, timeout_s: float = 10.0) -> None:
        self.closing = True
        for w in self.workers:
            if w.lost is None:
                try:
                    w.send(None)
                except (OSError, ValueError):
                    pass
        for w in self.workers:
            w.process.join(timeout_s)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout_s)
            w.conn.close()


class ProcessPlayer:
    """One policy's `agents.rollouts.EpisodePlayer` over a ProcessPool (its factories already pickled)."""

    def __init__(self, pool: ProcessPool, key: str, factory: bytes, make_env: bytes) -> None:
        self.pool, self.key, self.factory, self.make_env = pool, key, factory, make_env

    async def play(self, task_id: str, sample: int, **episode: Any) -> EpisodeRecord:
        """`EpisodePlayer.play`; `episode`: max_turns, temperature, timeout_s."""
        return await self.pool.play(self.key, self.factory, self.make_env, task_id, sample, **episode)


@asynccontextmanager
async def process_pool(workers: int, threads: int | None) -> AsyncIterator[ProcessPool]:
    """Start the workers (they load their policy at the first episode each plays) and stop them on exit."""
    pool = ProcessPool(workers, threads)
    try:
        pool.start(asyncio.get_running_loop())
        yield pool
    finally:
        await asyncio.to_thread(pool.close)
