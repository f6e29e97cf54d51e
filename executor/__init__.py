"""Where the work runs: this machine (`executor.kind: local`, the default) or a Ray cluster (`ray`).

The composition root (gapforge/wiring.py) asks here for the pieces that differ, and passes them to
the stage services through narrow seams; the services do not know which executor they run on:

- `episode_player(cfg, policy_factory, make_env, concurrency, local_workers=)`: an async context manager giving
  the collector's `agents.rollouts.EpisodePlayer`: None (the collector plays on its own loop), local worker
  processes (`local_workers` > 1: executor/processes.py) or Ray actors;
- `job_runner(cfg)`: `training.run.run_jobs` or its Ray twin (one task per job, adapter files back);
- `sandbox_checks(cfg, sandbox, policy_factory, local_workers=, threads=)`: locally None (every check in this
  process) or, with `local_workers` > 1, the readiness check on local worker processes and the others here; on
  Ray every check on a Docker node (executor/validation.py: `agents.validation.SandboxChecks`).

Ray is imported only when `kind` is ray (the `ray` extra).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

from gapforge.executor.config import ExecutorConfig as ExecutorConfig
from gapforge.executor.config import JobResources as JobResources
from gapforge.executor.errors import ExecutorUnavailable as ExecutorUnavailable


def connect(cfg: ExecutorConfig) -> None:
    """Join the cluster now (a `run` checks this at its start: a head that does not answer is exit 2 with one line)."""
    if cfg.kind == "ray":
        from gapforge.executor.cluster import connect as join

        join(cfg)


@contextlib.asynccontextmanager
async def episode_player(
    cfg: ExecutorConfig,
    policy_factory: Callable[[], Any],
    make_env: Callable[[], Any],
    concurrency: int,
    *,
    local_workers: int = 1,
    threads: int | None = None,
) -> AsyncIterator[Any]:
    if cfg.kind == "local":
        from gapforge.executor.processes import picklable, process_pool

        if local_workers <= 1 or not picklable(policy_factory, make_env):
            yield None
            return
        async with process_pool(local_workers, threads) as pool:
            yield pool.player(policy_factory, make_env)
        return
    from gapforge.executor.rollouts import ray_player

    async with ray_player(cfg, policy_factory, make_env, concurrency) as player:
        yield player


def job_runner(cfg: ExecutorConfig) -> Callable[..., Any]:
    """(jobs, spec_dir, on_line) -> [training.run.JobOutcome]: local processes one after the other, or Ray tasks."""
    if cfg.kind == "local":
        from gapforge.training.run import run_jobs

        return run_jobs
    from gapforge.executor.training import run_jobs_on_ray

    return functools.partial(run_jobs_on_ray, cfg)


def sandbox_checks(
    cfg: ExecutorConfig,
    sandbox: Any,
    policy_factory: Callable[[], Any] | None = None,
    *,
    local_workers: int = 1,
    threads: int | None = None,
) -> Any:
    if cfg.kind == "local":
        from gapforge.executor.processes import picklable

        if local_workers <= 1 or policy_factory is None or not picklable(policy_factory):
            return None
        from gapforge.executor.validation import LocalReadinessChecks

        return LocalReadinessChecks(sandbox, policy_factory, workers=local_workers, threads=threads)
    from gapforge.executor.validation import RaySandboxChecks

    return RaySandboxChecks(cfg, sandbox, policy_factory)
