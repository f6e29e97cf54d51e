"""GRPO readiness on local worker processes (`executor.kind: local`, a local policy on a CPU-only machine).

The readiness check plays G x K policy episodes in a candidate env. Played in the driver, every check
shares the driver's one base policy, so its one decoding thread and the event loop (one GIL) bound them:
in the demo the two capability branches' checks ran at once and kept ~0.9 of the 2 cores busy (vmstat:
45% idle for the 75 s they took, on the capability phase's critical path).

`LocalReadinessChecks` is the `agents.selftest.SandboxChecks` drop-in for that case: the self-test stays in
this process (`validate_env` / `avalidate_env` are sandbox.checks' own); `readiness_for(module)` runs the
whole check in a spawned worker process (`workers` of them, `threads` torch threads each), which builds
its own policy from the picklable factory, opens the module in its own sandbox pool (generated code still
runs only in the sandbox) and returns the CheckResult. The episodes are the same as in the driver: each
samples from its key (`grpo_ready:<seed>#<sample>`) and the policy's seed, not from the process or the
batch it decodes in (tests/executor/test_readiness.py).

Faults: an exception the check raises (its InfrastructureFailure among them) comes back with its type, or as a
RuntimeError with its type, message and traceback when it does not travel (executor.processes._error_blob); a
worker that dies (killed, out of memory) is WorkerLost (an IncompleteStage, exit 3: the stored attempts stay,
the same command runs the check again), and the next check starts a new worker. Workers die with the driver
(PR_SET_PDEATHSIG); the containers of a dead worker are swept by the next pool. A check whose episode runner
cannot travel (a test's closure) runs in this process, as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import pickle
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from gapforge.executor.processes import WorkerLost, _die_with_parent, _error_blob, picklable
from gapforge.executor.validation import checks_in_pool
from gapforge.sandbox.checks import avalidate_env, validate_env
from gapforge.sandbox.checks.grpo import acheck_grpo_ready, check_grpo_ready
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.config import SandboxConfig


def _init_worker(threads: int | None) -> None:
    """Each worker: dies with the driver, decodes on `threads` torch threads, and imports the policy stack once."""
    _die_with_parent()
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    from transformers.utils import logging as hf_logging

    if threads:
        torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()  # the driver already showed its own "Loading weights"


def readiness_in_worker(
    module: str,
    sandbox: SandboxConfig,
    policy_factory: Callable[[], Any],
    seeds: list[int],
    run_episode: Any,
    cfg: Any,
    kwargs: dict[str, Any],
) -> tuple[bool, Any]:
    """The worker's body: (True, CheckResult), or (False, the exception pickled: executor.processes._error_blob)."""
    try:
        pool_size = min(sandbox.pool_size, int(kwargs.get("concurrency") or 4))
        return True, checks_in_pool(
            "readiness", Path(module), sandbox, policy_factory, (seeds, run_episode, cfg), kwargs, pool_size=pool_size
        )
    except Exception as e:  # noqa: BLE001 - the check's failure goes back to the driver with its type when it travels
        return False, _error_blob(e)


class LocalReadinessChecks:
    """The self-test here, GRPO readiness on `workers` local processes (module docstring)."""

    def __init__(
        self, sandbox: SandboxConfig, policy_factory: Callable[[], Any], *, workers: int, threads: int | None
    ) -> None:
        self.sandbox = sandbox
        self.factory = policy_factory  # picklable: executor.sandbox_checks checks it
        self.workers = max(1, workers)
        self.threads = threads
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    self_test_here = (
        True  # agents.selftest: the self-test opens this machine's sandboxes (the Ray drop-in's runs remotely)
    )
    validate_env = staticmethod(validate_env)
    avalidate_env = staticmethod(avalidate_env)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(self.threads,),
                )
            return self._pool

    def _submit(
        self, module: str | Path, seeds: list[int], run_episode: Any, cfg: Any, kw: dict[str, Any]
    ) -> concurrent.futures.Future:
        args = (str(Path(module).resolve()), self.sandbox, self.factory, list(seeds), run_episode, cfg, kw)
        return self._executor().submit(readiness_in_worker, *args)

    @staticmethod
    def _result(reply: tuple[bool, Any]) -> CheckResult:
        ok, payload = reply
        if ok:
            return payload
        raise pickle.loads(payload)

    def _lost(self, e: BaseException) -> WorkerLost:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        return WorkerLost(
            f"the local GRPO-readiness worker process ended ({type(e).__name__}: {e}); the attempts so far are "
            "stored: run the same command again (or set executor.local_rollout_workers=1)"
        )

    def readiness_for(self, module: str | Path) -> Callable[..., Any]:
        """An `acheck_grpo_ready` drop-in for this module: (open_env, seeds, policy, run_episode, cfg, **kw) -> CheckResult.
        `open_env` and `policy` are the driver's and unused, unless the runner cannot travel (then it all runs here)."""

        async def acheck(
            open_env: Any, seeds: list[int], policy: Any, run_episode: Any, cfg: Any, **kw: Any
        ) -> CheckResult:
            if policy is None or run_episode is None or not picklable(run_episode):
                return await acheck_grpo_ready(open_env, seeds, policy, run_episode, cfg, **kw)
            try:
                reply = await asyncio.wrap_future(self._submit(module, seeds, run_episode, cfg, kw))
            except BrokenProcessPool as e:
                raise self._lost(e) from None
            return self._result(reply)

        return acheck

    def check_grpo_ready_for(self, module: str | Path) -> Callable[..., CheckResult]:
        """The same for sync callers (`check_grpo_ready`'s signature)."""

        def check(open_env: Any, seeds: list[int], policy: Any, run_episode: Any, cfg: Any, **kw: Any) -> CheckResult:
            if policy is None or run_episode is None or not picklable(run_episode):
                return check_grpo_ready(open_env, seeds, policy, run_episode, cfg, **kw)
            try:
                reply = self._submit(module, seeds, run_episode, cfg, kw).result()
            except BrokenProcessPool as e:
                raise self._lost(e) from None
            return self._result(reply)

        return check

    def close(self) -> None:
        """Stop the workers (a check in flight ends with them)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # an idle worker exits at once; one still in a check is stopped
            process.join(5)
            if process.is_alive():
                process.kill()
