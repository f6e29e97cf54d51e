"""Env validation and GRPO readiness on Ray nodes that run Docker (`executor.validation`).

`RaySandboxChecks` offers drop-ins for `sandbox.checks.avalidate_env` / `validate_env` and
`acheck_grpo_ready` / `check_grpo_ready` with the same signatures: instead of opening the module
through the driver's opener, it sends the module's bytes to a Ray task placed on a node holding
`executor.docker_resource`; that task opens the module in its own node's sandbox pool (generated
code still runs only in the sandbox), builds its own policy for readiness (`policy_factory`, not the
driver's object: an HTTP session or a loaded model does not travel), runs the checks and returns the
report to the driver. The driver's progress callback hears one line per remote call (the checks
inside run remotely). A sandbox or endpoint failing past its retries comes back as the same
`incomplete` report / InfrastructureFailure as on one machine.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import PolicyModel
from gapforge.executor.cluster import check_feasible, connect, options
from gapforge.executor.config import ExecutorConfig
from gapforge.sandbox.checks import ValidationReport
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.config import SandboxConfig


def checks_on_worker(
    kind: str,
    module_name: str,
    code: bytes,
    sandbox: SandboxConfig,
    worker_dir: str,
    policy_factory: Callable[[], PolicyModel] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The Ray task's body: the module's bytes written on this node, then `checks_in_pool` there."""
    path = Path(worker_dir) / "modules" / hashlib.sha256(code).hexdigest()[:16] / module_name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        path.write_bytes(code)
    return checks_in_pool(kind, path, sandbox, policy_factory, args, kwargs, pool_size=min(sandbox.pool_size, 2))


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
    policy built here by `policy_factory` (a Ray task's body, and a local readiness worker's: executor/readiness.py)."""
    from gapforge.sandbox.checks import avalidate_env
    from gapforge.sandbox.checks.grpo import acheck_grpo_ready
    from gapforge.sandbox.env import SandboxedEnv
    from gapforge.sandbox.pool import SandboxPool

    pool = SandboxPool(sandbox, size=pool_size)

    def open_env() -> SandboxedEnv:
        return SandboxedEnv.pooled(path, pool)

    async def run() -> Any:
        policy = policy_factory() if policy_factory is not None else None
        try:
            if kind == "self_test":
                return await avalidate_env(open_env, policy=policy, **{**kwargs, "module": path})
            return await acheck_grpo_ready(open_env, args[0], policy, *args[1:], **kwargs)
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
        self.cfg = cfg
        self.sandbox = sandbox
        self.policy_factory = policy_factory

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
            kind, path.name, path.read_bytes(), self.sandbox, self.cfg.worker_dir, factory, args, kwargs
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

    async def avalidate_env(self, open_env: Any, **kwargs: Any) -> ValidationReport:
        """`sandbox.checks.avalidate_env` on a Docker node (`open_env`, the driver's opener, is not used there)."""
        module, policy, rest = self._self_test_kwargs(dict(kwargs))
        report = await self._submit("self_test", module, policy, (), rest)
        return report.model_copy(update={"module": str(module)})

    def validate_env(self, open_env: Any, **kwargs: Any) -> ValidationReport:
        module, policy, rest = self._self_test_kwargs(dict(kwargs))
        ray = connect(self.cfg)
        report = ray.get(self._submit("self_test", module, policy, (), rest))
        return report.model_copy(update={"module": str(module)})

    def readiness_for(self, module: str | Path) -> Callable[..., Any]:
        """An `acheck_grpo_ready` drop-in for this module: (open_env, seeds, policy, run_episode, cfg, **kw) -> CheckResult."""

        async def acheck(
            open_env: Any, seeds: list[int], policy: PolicyModel | None, run_episode: Any, cfg: Any, **kw: Any
        ) -> CheckResult:
            return await self._submit("readiness", module, policy, (seeds, run_episode, cfg), kw)

        return acheck

    def check_grpo_ready_for(self, module: str | Path) -> Callable[..., CheckResult]:
        """The same for sync callers (`check_grpo_ready`'s signature)."""

        def check(
            open_env: Any, seeds: list[int], policy: PolicyModel | None, run_episode: Any, cfg: Any, **kw: Any
        ) -> CheckResult:
            return connect(self.cfg).get(self._submit("readiness", module, policy, (seeds, run_episode, cfg), kw))

        return check
