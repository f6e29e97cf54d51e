"""Stage service: the self-test of one synthetic env module in the sandbox (the checks: sandbox/checks/README.md).

Plain functions that never print and return typed results; `gapforge env validate`,
`gapforge demo` and the graph's validator node all call `validate_module` (or its
async twin `avalidate_module`) and render the result themselves.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gapforge.agents.deps import StageDeps
from gapforge.agents.episode import run_episode
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import PolicyModel
from gapforge.sandbox.checks import SplitTexts, ValidationReport, avalidate_env, validate_env
from gapforge.sandbox.checks.grpo import EpisodeRunner
from gapforge.sandbox.env import SandboxedEnv


class SandboxChecks(Protocol):
    """Where the sandbox checks of a module run when not on this machine (executor.validation.RaySandboxChecks):
    drop-ins for sandbox.checks.validate_env / avalidate_env that read the module from `module=`."""

    def validate_env(self, open_env: Any, **kwargs: Any) -> ValidationReport: ...

    async def avalidate_env(self, open_env: Any, **kwargs: Any) -> ValidationReport: ...


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
    worker process runs the check, executor/readiness.py)."""
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


def validate_module(
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
    """Run every check on `path` in sandboxes leased from `deps.sandbox_pool` (or where `checks` runs
    them: executor.validation.RaySandboxChecks, on a Docker node of a Ray cluster) and write the
    JSON report (`json_out`, default `report_dir/<stem>-<sha8>.json`). `target_result_shapes`
    (observed in the target's stored episodes) enables check `result_format`, `split_texts`
    (agents.analysis.split.split_openings of the run) check `contamination`.

    Thresholds, readiness settings and the turn cap come from `deps`. `policy` None skips
    the GRPO-readiness check with a note. Bad input -> EnvError before any sandbox starts.
    For a caller with an event loop, or a policy bound to one (an endpoint policy's HTTP
    session), use `avalidate_module` on that loop and close the policy there.
    """
    path = _checked(path, seeds)
    tools = target_tools(target) if target else None
    run = checks.validate_env if checks is not None else validate_env
    report = run(
        _opener(deps, path, checks),
        target_tools=tools,
        seeds=seeds,
        policy=policy,
        **_settings(deps, policy, path, target, target_result_shapes, progress),
        split_texts=split_texts,
    )
    return _finish(report, path, policy, report_dir, json_out)


async def avalidate_module(
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
    """`validate_module` on the caller's event loop (graph nodes, the CLI's one loop): the
    blocking checks run in a worker thread; the policy's GRPO-readiness rollouts run on this
    loop, so its HTTP session is the caller's to close (`await policy.aclose()` here)."""
    path = _checked(path, seeds)
    tools = await asyncio.to_thread(target_tools, target) if target else None
    run = checks.avalidate_env if checks is not None else avalidate_env
    report = await run(
        _opener(deps, path, checks),
        target_tools=tools,
        seeds=seeds,
        policy=policy,
        **_settings(deps, policy, path, target, target_result_shapes, progress),
        split_texts=split_texts,
    )
    return await asyncio.to_thread(_finish, report, path, policy, report_dir, json_out)


def _checked(path: Path, seeds: int) -> Path:
    path = Path(path)
    if not path.is_file() or path.suffix != ".py":
        raise EnvError(f"env module '{path}' not found: give the path of a .py file")
    if seeds < 2:
        raise EnvError(f"--seeds {seeds}: need at least 2 seeds to compare scenarios")
    return path


def _opener(deps: StageDeps, path: Path, checks: SandboxChecks | None) -> Callable[[], SandboxedEnv] | None:
    """Envs on the caller-owned pool, each leasing its sandbox lazily on first use (None when `checks`
    runs the self-test elsewhere: this machine then needs no Docker; `checks.self_test_here`: it runs here)."""
    if checks is not None and not getattr(checks, "self_test_here", False):
        return None
    pool = deps.sandbox_pool
    return lambda: SandboxedEnv.pooled(path, pool)


def _settings(
    deps: StageDeps,
    policy: PolicyModel | None,
    path: Path,
    target: str | None,
    target_result_shapes: dict[str, Any] | None,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    return {
        "run_episode": readiness_runner(deps.rollouts.max_turns) if policy is not None else None,
        "readiness": deps.readiness,
        "thresholds": deps.self_test,
        "module": path,
        "target": target,
        "target_result_shapes": target_result_shapes,
        "progress": progress,
    }


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
