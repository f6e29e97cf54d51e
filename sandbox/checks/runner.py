"""`validate_env`: the validation of one env, every check of sandbox/checks/README.md in order, one ValidationReport.

This is what the graph's `validate` stage (agents/synthesis/attempt.py, between the static gate and the LLM review)
and `gapforge env validate` (agents/validation.py) call, and what a Ray Docker node or a local worker process runs
for them (executor/validation.py); `open_env` decides where the env runs (sandbox, or in-process for trusted code).
It is async: the blocking checks run in a worker thread, the policy's rollouts on the caller's loop.

Infrastructure is never the env's failure: sandboxes lost and recovered during the
checks are listed in the report (`sandbox_faults`); a sandbox lost for good
(sandbox.errors.SandboxLost past its retries) or an endpoint down past the readiness
retries (envs.errors.InfrastructureFailure) stops the validation: the check it hit
is INCOMPLETE, the checks after it are not run, and the report says so in
`incomplete` (the caller stops the stage: exit 3)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gapforge.envs.errors import InfrastructureFailure
from gapforge.envs.protocol import PolicyModel
from gapforge.sandbox.checks.adversarial import check_graded, check_not_trivial
from gapforge.sandbox.checks.basic import check_fidelity, check_loads
from gapforge.sandbox.checks.behaviour import check_deterministic, check_diverse, check_solvable
from gapforge.sandbox.checks.contamination import SplitTexts, check_contamination
from gapforge.sandbox.checks.exploits import check_reward_hacking
from gapforge.sandbox.checks.grpo import EpisodeRunner, check_grpo_ready
from gapforge.sandbox.checks.leakage import check_no_leakage
from gapforge.sandbox.checks.probe import EnvFault, OpenEnv, Probe
from gapforge.sandbox.checks.report import MAX_FAULTS_KEPT, CheckResult, ValidationReport
from gapforge.sandbox.checks.result_shapes import Shape, check_result_format
from gapforge.sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds
from gapforge.sandbox.errors import SandboxLost

CHECKS = (
    "loads",
    "fidelity",
    "deterministic",
    "diverse",
    "solvable",
    "not_trivial",
    "graded",
    "result_format",
    "no_leakage",
    "contamination",
    "reward_hacking",
    "grpo_ready",
)
Progress = Callable[[str], None]
INFRA_ERRORS = (SandboxLost, InfrastructureFailure)


class FaultLog:
    """`open_env` that keeps each opened env's record of sandboxes lost to outside causes
    (`SandboxedEnv.sandbox_faults`; in-process envs have none)."""

    def __init__(self, open_env: OpenEnv) -> None:
        self._open = open_env
        self._logs: list[Any] = []

    def __call__(self) -> Any:
        env = self._open()
        log = getattr(env, "sandbox_faults", None)
        if log is not None:
            self._logs.append(log)
        return env

    def faults(self) -> list[dict[str, Any]]:
        return [dict(f) for log in self._logs for f in log]


def _cause(e: BaseException) -> str:
    return e.cause if isinstance(e, InfrastructureFailure) else "sandbox"


def _stopped(name: str, e: BaseException) -> tuple[CheckResult, dict[str, Any]]:
    text = " ".join(str(e).split())[:500]
    return (
        CheckResult.interrupted(name, f"not finished: the {_cause(e)} kept failing ({text}); not the env's doing"),
        {"check": name, "cause": _cause(e), "error": text},
    )


async def validate_env(
    open_env: OpenEnv,
    *,
    target_tools: list[dict[str, Any]] | None = None,
    seeds: int = 20,
    policy: PolicyModel | None = None,
    run_episode: EpisodeRunner | None = None,
    readiness: GRPOReadinessConfig | None = None,
    thresholds: SelfTestThresholds | None = None,
    module: str | Path | None = None,
    target: str | None = None,
    target_result_formats: dict[str, str] | None = None,
    target_result_shapes: dict[str, Shape] | None = None,
    split_texts: SplitTexts | None = None,
    progress: Progress | None = None,
    grpo_only_if_passed: bool = False,
) -> ValidationReport:
    """Run every check; env failures become failed checks, never exceptions. The policy's HTTP session stays the
    caller's (its rollouts run on this loop).

    `target_result_shapes` (sandbox.checks.result_shapes.observed_result_shapes of the target's
    stored episodes) enables check `result_format`; `split_texts` (the target's openings by split)
    enables check `contamination`. With `grpo_only_if_passed`, the policy
    rollouts of `grpo_ready` are spent only when every cheaper required check passed.

    Raises only for setup problems (sandbox.errors.SandboxError) and bad arguments (ValueError).
    """
    _check_args(seeds, policy, run_episode)
    started = time.perf_counter()
    log = FaultLog(open_env)
    results, tools, capability, stop = await asyncio.to_thread(
        _cheap_checks,
        log,
        seeds,
        target_tools,
        target_result_formats,
        target_result_shapes,
        split_texts,
        thresholds,
        progress,
    )
    grpo = _grpo_skip(results, tools, policy, grpo_only_if_passed, stop)
    if grpo is None:
        if progress:
            progress("grpo_ready")
        t0 = time.perf_counter()
        try:
            grpo = await check_grpo_ready(
                log, list(range(seeds)), policy, run_episode, readiness or GRPOReadinessConfig()
            )
        except INFRA_ERRORS as e:
            grpo, stop = _stopped("grpo_ready", e)
        grpo.seconds = round(time.perf_counter() - t0, 3)
    return _report(results + [grpo], module, capability, seeds, target, started, log, stop)


def _check_args(seeds: int, policy: PolicyModel | None, run_episode: EpisodeRunner | None) -> None:
    if seeds < 2:
        raise ValueError(f"seeds must be >= 2 to compare scenarios, got {seeds}")
    if policy is not None and run_episode is None:
        raise ValueError("a policy needs run_episode (e.g. agents.policy.run_episode adapted to return the reward)")


def _timed(name: str, progress: Progress | None, fn: Callable[[], CheckResult]) -> CheckResult:
    if progress:
        progress(name)
    t0 = time.perf_counter()
    result = fn()
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _cheap_checks(
    open_env: OpenEnv,
    seeds: int,
    target_tools: list[dict[str, Any]] | None,
    target_result_formats: dict[str, str] | None,
    target_result_shapes: dict[str, Shape] | None,
    split_texts: SplitTexts | None,
    thresholds: SelfTestThresholds | None,
    progress: Progress | None,
) -> tuple[list[CheckResult], list[dict[str, Any]] | None, str | None, dict[str, Any] | None]:
    """Every check but grpo_ready (blocking env calls): (results, the env's tools or None, its capability,
    where the infrastructure stopped the checks or None)."""
    th = thresholds or SelfTestThresholds()
    seed_list = list(range(seeds))
    probe = Probe(open_env)
    results: list[CheckResult] = []
    capability: str | None = None
    tools: list[dict[str, Any]] | None = None
    stop: dict[str, Any] | None = None
    try:
        if progress:
            progress("loads")
        t0 = time.perf_counter()
        try:
            loads, tools = check_loads(probe)
        except INFRA_ERRORS as e:
            stopped, stop = _stopped("loads", e)
            results.append(stopped)
            results += [CheckResult.skip(name, "not run: the validation stopped (see loads)") for name in CHECKS[1:-1]]
            return results, None, None, stop
        loads.seconds = round(time.perf_counter() - t0, 3)
        results.append(loads)
        capability = _capability(probe) if tools is not None else None
        if tools is None:
            blocked = "not run: the env did not load (see loads)"
            for name in CHECKS[1:-1]:
                no_target = (
                    (name == "fidelity" and target_tools is None)
                    or (name == "result_format" and target_result_shapes is None)
                    or (name == "contamination" and split_texts is None)
                )
                results.append(
                    CheckResult.skip(name, blocked)
                    if no_target
                    else CheckResult.fail(name, blocked, blocked_by="loads")
                )
        else:
            for name, fn in (
                ("fidelity", lambda: check_fidelity(probe, tools, target_tools, seed_list, target_result_formats)),
                ("deterministic", lambda: check_deterministic(probe, seed_list, th)),
                ("diverse", lambda: check_diverse(probe, seed_list, th)),
                ("solvable", lambda: check_solvable(probe, seed_list, th)),
                ("not_trivial", lambda: check_not_trivial(probe, seed_list, tools, th)),
                ("graded", lambda: check_graded(probe, seed_list, tools, th)),
                ("result_format", lambda: check_result_format(probe, seed_list, target_result_shapes)),
                ("no_leakage", lambda: check_no_leakage(probe, seed_list, tools)),
                ("contamination", lambda: check_contamination(probe, seed_list, split_texts, th)),
                ("reward_hacking", lambda: check_reward_hacking(probe, seed_list, tools, th)),
            ):
                if stop is not None:
                    results.append(
                        CheckResult.skip(
                            name, f"not run: the validation stopped at {stop['check']} (the {stop['cause']})"
                        )
                    )
                    continue
                try:
                    results.append(_timed(name, progress, fn))
                except INFRA_ERRORS as e:
                    stopped, stop = _stopped(name, e)
                    results.append(stopped)
    finally:
        probe.close()
    return results, tools, capability, stop


def _grpo_skip(
    results: list[CheckResult],
    tools: list[dict[str, Any]] | None,
    policy: PolicyModel | None,
    grpo_only_if_passed: bool,
    stop: dict[str, Any] | None = None,
) -> CheckResult | None:
    """The grpo_ready result when the check is not run, else None."""
    if stop is not None:
        return CheckResult.skip(
            "grpo_ready", f"not run: the validation stopped at {stop['check']} (the {stop['cause']})"
        )
    failed = [c.name for c in results if c.required and not c.passed]
    if tools is None:
        return CheckResult.skip("grpo_ready", "not run: the env did not load (see loads)", required=policy is not None)
    if failed and grpo_only_if_passed and policy is not None:
        return CheckResult.skip(
            "grpo_ready", f"not run (no rollouts spent): cheaper checks failed ({', '.join(failed)})"
        )
    return None


def _report(
    results: list[CheckResult],
    module: str | Path | None,
    capability: str | None,
    seeds: int,
    target: str | None,
    started: float,
    log: FaultLog,
    stop: dict[str, Any] | None,
) -> ValidationReport:
    faults = log.faults()
    return ValidationReport(
        module=str(module) if module is not None else "env",
        module_sha256=_sha256(module),
        capability=capability,
        seeds=seeds,
        target=target,
        checks=results,
        seconds=round(time.perf_counter() - started, 3),
        sandbox_faults=faults[:MAX_FAULTS_KEPT],
        sandbox_fault_count=len(faults),
        incomplete=stop,
    )


def _capability(probe: Probe) -> str | None:
    """The env's declared capability (describe()["capability"] or a `capability` attribute)."""
    try:
        env = probe.env()
        describe = getattr(env, "describe", None)
        info = probe.guard("describe", None, describe) if callable(describe) else {}
    except EnvFault:
        return None
    value = (info or {}).get("capability") if isinstance(info, dict) else None
    value = value or getattr(env, "capability", None)
    return value if isinstance(value, str) else None


def _sha256(module: str | Path | None) -> str | None:
    if module is None or not Path(module).is_file():
        return None
    return hashlib.sha256(Path(module).read_bytes()).hexdigest()
