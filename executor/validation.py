"""The validation's checks (sandbox/checks/) on other processes: the `agents.validation.SandboxChecks` drop-ins.

`RaySandboxChecks` (`executor.kind: ray`, `executor.validation`): drop-ins for `sandbox.checks.validate_env` and the
readiness check `check_grpo_ready` with the same signatures that send the module's bytes to a Ray task on a node
holding `executor.docker_resource`. The task opens the module in its own node's sandbox pool (generated code still
runs only in the sandbox), builds its own policy for readiness (`policy_factory`: the driver's HTTP session or loaded
model does not travel) and returns the report. The driver's progress callback hears one line per remote call. A
sandbox or endpoint failing past its retries comes back as the same `incomplete` report / InfrastructureFailure as on
one machine.

`LocalReadinessChecks` (`executor.kind: local`, a local policy on a CPU-only machine) runs the readiness check (G x K
policy episodes in a candidate env) on spawned worker processes (`workers`, `threads` torch threads each). Played in
the driver, every check shares its one base policy, so one decoding thread and one GIL bound them: in the demo the two
capability branches' checks kept ~0.9 of the 2 cores busy (vmstat: 45% idle for the 75 s they took, on the
capability phase's critical path). The other checks stay here (`validate_env` is sandbox.checks' own). A worker
builds its own policy from the picklable factory, opens the module in its own sandbox pool and returns the
CheckResult; its episodes are the driver's: each samples from its key (`grpo_ready:<seed>#<sample>`) and the
policy's seed, not from the process or batch (tests/executor/test_readiness.py).

Faults of a local worker: the check's exception (InfrastructureFailure among them) comes back with its type, or as a
RuntimeError with its type, message and traceback (executor.processes._error_blob); a worker that dies (killed, out
of memory) is WorkerLost (an IncompleteStage, exit 3: the stored attempts stay, the same command runs the check
again), and the next check starts a new worker. Workers die with the driver (PR_SET_PDEATHSIG); a dead worker's
containers are swept by the next pool. A check whose episode runner cannot travel (a test's closure) runs here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import multiprocessing
import pickle
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import PolicyModel
from gapforge.executor.cluster import check_feasible, connect, options
from gapforge.executor.config import ExecutorConfig
from gapforge.executor.processes import WorkerLost, _error_blob, init_worker, picklable
from gapforge.sandbox.checks import ValidationReport, validate_env
from gapforge.sandbox.checks.grpo import check_grpo_ready
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.config import SandboxConfig


def checks_on_worker(
    module_name: str, code: bytes, worker_dir: str, kind: str, sandbox: SandboxConfig, *check: Any
) -> Any:
    """The Ray task's body: the module's bytes written on this node, then `checks_in_pool` there (`check`: the
    policy factory, args and kwargs)."""
    path = Path(worker_dir) / "modules" / hashlib.sha256(code).hexdigest()[:16] / module_name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        path.write_bytes(code)
    return checks_in_pool(kind, path, sandbox, *check, pool_size=min(sandbox.pool_size, 2))


def checks_in_pool(
    kind: str,
    path: Path,
    sandbox: SandboxConfig,
    policy_factory: Callable[[], PolicyModel] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    pool_size: int,
) -> Any:
    """The checks of the module at `path` (`kind` = self_test | readiness) in a sandbox pool of this process, with a
    policy built here by `policy_factory` (a Ray task's body, and a local readiness worker's: `readiness_in_worker`)."""
    from gapforge.sandbox.env import SandboxedEnv
    from gapforge.sandbox.pool import SandboxPool

    pool = SandboxPool(sandbox, size=pool_size)

    def open_env() -> SandboxedEnv:
        return SandboxedEnv.pooled(path, pool)

    async def run() -> Any:
        policy = policy_factory() if policy_factory is not None else None
        try:
            if kind == "self_test":
                return await validate_env(open_env, policy=policy, **{**kwargs, "module": path})
            return await check_grpo_ready(open_env, args[0], policy, *args[1:], **kwargs)
        finally:
            close = getattr(policy, "aclose", None)
            if close is not None:
                await close()

    try:
        return asyncio.run(run())
    finally:
        pool.close()


class RaySandboxChecks:
    """The sandbox checks of one env module, run on a Docker node of the Ray cluster."""

    def __init__(
        self, cfg: ExecutorConfig, sandbox: SandboxConfig, policy_factory: Callable[[], PolicyModel] | None = None
    ) -> None:
        self.cfg, self.sandbox, self.policy_factory = cfg, sandbox, policy_factory

    def _submit(
        self, kind: str, module: str | Path, policy: PolicyModel | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        ray = connect(self.cfg)
        opts = options(self.cfg, self.cfg.validation, docker=self.sandbox.backend == "docker")
        check_feasible(ray, opts, "executor.validation")
        path = Path(module)
        factory = self.policy_factory if policy is not None else None
        if policy is not None and factory is None:
            raise ValueError("GRPO readiness on Ray needs a policy_factory: the driver's policy object does not travel")
        remote = ray.remote(checks_on_worker).options(max_retries=self.cfg.max_retries, **opts)
        return remote.remote(
            path.name, path.read_bytes(), self.cfg.worker_dir, kind, self.sandbox, factory, args, kwargs
        )

    @staticmethod
    def _self_test_kwargs(kwargs: dict[str, Any]) -> tuple[str | Path, PolicyModel | None, dict[str, Any]]:
        module = kwargs.pop("module", None)
        if module is None:
            raise ValueError("a remote self-test needs module= (the path whose bytes go to the worker)")
        policy = kwargs.pop("policy", None)
        progress = kwargs.pop("progress", None)
        if progress is not None:
            progress("self-test on a Ray Docker node")
        return module, policy, kwargs

    async def validate_env(self, open_env: Any, **kwargs: Any) -> ValidationReport:
        """`sandbox.checks.validate_env` on a Docker node (`open_env`, the driver's opener, is not used there)."""
        module, policy, rest = self._self_test_kwargs(dict(kwargs))
        report = await self._submit("self_test", module, policy, (), rest)
        return report.model_copy(update={"module": str(module)})

    def readiness_for(self, module: str | Path) -> Callable[..., Any]:
        """A `check_grpo_ready` drop-in for this module: (open_env, seeds, policy, run_episode, cfg, **kw) -> CheckResult."""

        async def check(
            open_env: Any, seeds: list[int], policy: PolicyModel | None, run_episode: Any, cfg: Any, **kw: Any
        ) -> CheckResult:
            return await self._submit("readiness", module, policy, (seeds, run_episode, cfg), kw)

        return check


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
    """The checks here, but the readiness check on `workers` local processes (module docstring)."""

    def __init__(
        self, sandbox: SandboxConfig, policy_factory: Callable[[], Any], *, workers: int, threads: int | None
    ) -> None:
        self.sandbox, self.factory = sandbox, policy_factory  # picklable: executor.sandbox_checks checks it
        self.workers, self.threads = max(1, workers), threads
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    self_test_here = True  # agents.validation: the other checks open this machine's sandboxes (Ray's: remotely)
    validate_env = staticmethod(validate_env)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=init_worker,
                    initargs=(self.threads,),
                )
            return self._pool

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
        """A `check_grpo_ready` drop-in for this module: (open_env, seeds, policy, run_episode, cfg, **kw) -> CheckResult.
        `open_env` and `policy` are the driver's and unused, unless the runner cannot travel (then it all runs here)."""

        async def check(
            open_env: Any, seeds: list[int], policy: Any, run_episode: Any, cfg: Any, **kw: Any
        ) -> CheckResult:
            if policy is None or run_episode is None or not picklable(run_episode):
                return await check_grpo_ready(open_env, seeds, policy, run_episode, cfg, **kw)
            args = (str(Path(module).resolve()), self.sandbox, self.factory, list(seeds), run_episode, cfg, kw)
            try:
                ok, payload = await asyncio.wrap_future(self._executor().submit(readiness_in_worker, *args))
            except BrokenProcessPool as e:
                raise self._lost(e) from None
            if ok:
                return payload
            raise pickle.loads(payload)

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
