"""`gapforge env validate`'s validation of an env module given by path: the checks (sandbox/checks/runner.py) with
the settings of `deps`, the JSON report written; it never prints (the CLI renders the outcome). Also the readiness
check's episode runner (`readiness_runner`, the synthesis service's too) and `SandboxChecks`: where the checks run
when not all in this process (executor/validation.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gapforge.agents.deps import StageDeps
from gapforge.agents.episode import run_episode
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import PolicyModel
from gapforge.sandbox.checks import CheckResult, SplitTexts, ValidationReport, validate_env
from gapforge.sandbox.checks.grpo import EpisodeRunner
from gapforge.sandbox.env import SandboxedEnv


class SandboxChecks(Protocol):
    """Where the checks of a module run when not all in this process (executor/validation.py: on a Ray Docker node,
    or the readiness check on local worker processes): a drop-in for sandbox.checks.validate_env that reads the
    module from `module=`, and one for the readiness check (sandbox.checks.grpo.check_grpo_ready) of a module."""

    async def validate_env(self, open_env: Any, **kwargs: Any) -> ValidationReport: ...

    def readiness_for(self, module: str | Path) -> Callable[..., Awaitable[CheckResult]]: ...


NO_POLICY_NOTE = "skipped: no policy to sample (policy.kind is scripted; set policy.kind endpoint|local)"


@dataclass(frozen=True)
class ValidationOutcome:
    """A validated module: the report and where its JSON was written."""

    report: ValidationReport
    json_path: Path
    note: str | None = None  # set when the report had to be written somewhere else than asked

    @property
    def passed(self) -> bool:
        return self.report.passed


def readiness_runner(max_turns: int) -> EpisodeRunner:
    """The GRPO-readiness check's episode runner: the policy loop with a turn cap (picklable: a local
    worker process runs the check, executor/validation.py)."""
    return functools.partial(_readiness_episode, max_turns=max_turns)


async def _readiness_episode(policy: PolicyModel, env: Any, seed: int, temperature: float, *, max_turns: int) -> Any:
    return await run_episode(policy, env, seed, max_turns=max_turns, temperature=temperature)


def target_tools(name: str) -> list[dict[str, Any]]:
    """A target env's tool schemas (unknown name -> envs.errors.EnvError, one line)."""
    from gapforge.envs.registry import make_env

    env = make_env(name)
    try:
        return env.tools()
    finally:
        env.close()


async def validate_module(
    deps: StageDeps,
    path: Path,
    *,
    seeds: int,
    target: str | None = None,
    policy: PolicyModel | None = None,
    report_dir: Path,
    json_out: Path | None = None,
    target_result_shapes: dict[str, Any] | None = None,
    split_texts: SplitTexts | None = None,
    progress: Callable[[str], None] | None = None,
    checks: SandboxChecks | None = None,
) -> ValidationOutcome:
    """`sandbox.checks.validate_env` on `path` in sandboxes leased from `deps.sandbox_pool` (or where `checks` runs
    them), then the JSON report written (`json_out`, default `report_dir/<stem>-<sha8>.json`). `split_texts`:
    agents.analysis.split.split_openings of a run.

    Thresholds, readiness settings and the turn cap come from `deps`. `policy` None skips
    the GRPO-readiness check with a note. Bad input -> EnvError before any sandbox starts.
    The policy's rollouts run on the caller's loop: its HTTP session is the caller's to close."""
    path = Path(path)
    if not path.is_file() or path.suffix != ".py":
        why = "is a directory" if path.is_dir() else "is not a .py file" if path.exists() else "not found"
        raise EnvError(f"env module '{path}' {why}: give the path of a .py file")
    if seeds < 2:
        raise EnvError(f"--seeds {seeds}: need at least 2 seeds to compare scenarios")
    tools = await asyncio.to_thread(target_tools, target) if target else None
    # Envs on the caller-owned pool, each leasing its sandbox lazily on first use; None when `checks` runs the
    # self-test elsewhere (this machine then needs no Docker; `checks.self_test_here`: it runs here).
    opener = None
    if checks is None or getattr(checks, "self_test_here", False):
        pool = deps.sandbox_pool
        opener = lambda: SandboxedEnv.pooled(path, pool)  # noqa: E731
    report = await (validate_env if checks is None else checks.validate_env)(
        opener,
        target_tools=tools,
        seeds=seeds,
        policy=policy,
        run_episode=readiness_runner(deps.rollouts.max_turns) if policy is not None else None,
        readiness=deps.readiness,
        thresholds=deps.self_test,
        module=path,
        target=target,
        target_result_shapes=target_result_shapes,
        progress=progress,
        split_texts=split_texts,
    )
    return await asyncio.to_thread(_finish, report, path, policy, report_dir, json_out)


def _finish(
    report: ValidationReport, path: Path, policy: PolicyModel | None, report_dir: Path, json_out: Path | None
) -> ValidationOutcome:
    if policy is None and report.check("grpo_ready").skipped:
        report.check("grpo_ready").summary = NO_POLICY_NOTE
    default = Path(report_dir) / f"{path.stem}-{(report.module_sha256 or '')[:8]}.json"
    text = json.dumps(report.to_json(), indent=2, default=str)
    note = None
    for out in ([Path(json_out)] if json_out else []) + [default]:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            return ValidationOutcome(report=report, json_path=out, note=note)
        except OSError as e:  # a computed report is never lost: fall back to the workspace
            note = f"could not write {out} ({e.strerror}); the report went to {default}"
    raise EnvError(f"could not write the validation report to {json_out or default} nor {default}: {note}")
