"""Stage service: synthesize one capability's env with the generator / validator repair loop.

    result = synthesize_capability(deps, run_id, capability)

Every attempt is stored before it is validated (synthetic_envs: code, sha256, status
generated -> rejected | failed | accepted) and its verdict after (validations: the gate, the
self-test report, the review, the verdict, the feedback, rollouts, timings). A kill at any
point resumes at the attempt it was in: a stored attempt without a verdict is validated
again from its stored code (no new generator call); attempts with a verdict are not redone.
An env that never passes leaves the capability "unsynthesized" with the reason; the caller
goes on with the next capability. An endpoint (generator, reviewer, readiness policy) or a
sandbox that keeps failing past its retries is never an attempt's verdict: the stage stops
with IncompleteStage (agents/infra.py: exit 3), the attempt's code stays stored without a
verdict and a resume validates it again. Never prints; progress goes to `deps.progress`.
Generated code runs only in the sandbox: the service itself opens every module with
`_open_module`: `SandboxedEnv.pooled(path, deps.pool)` (a sandbox leased lazily from the caller's
pool), or `sandbox.env.open_env(path, deps.sandbox)` without a pool (there is no hook for an in-process env).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict

from agents.infra import INFRA_ERRORS, stop
from agents.synthesis.attempt import AttemptOutcome, avalidate_attempt, validate_attempt
from agents.synthesis.config import SynthesisConfig
from agents.synthesis.context import GeneratorContext, TargetFacts, gather_context
from agents.synthesis.generator import generate_env, generator_prompt
from envs.protocol import PolicyModel
from sandbox.checks import SelfTestThresholds
from sandbox.checks.grpo import EpisodeRunner
from sandbox.checks.result_shapes import observed_result_shapes
from sandbox.env import SandboxedEnv, open_env

Status = Literal["accepted", "unsynthesized"]


@dataclass
class SynthesisDeps:
    """What the stage needs; built by the composition root (gapforge/wiring.py) or the graph."""

    store: Any  # store.Store
    chat_model: BaseChatModel  # generator and reviewer
    sandbox: Any  # SandboxConfig: generated modules run only through sandbox.env.open_env with it
    pool: Any  # sandbox.pool.SandboxPool (or None: a container per env)
    workspace: Path
    config: SynthesisConfig
    thresholds: SelfTestThresholds | None = None
    policy: PolicyModel | None = None  # GRPO readiness: the base policy, when one is configured
    run_episode: EpisodeRunner | None = None
    readiness: Any = None  # GRPOReadinessConfig
    target: TargetFacts | None = None  # default: the env of the LACKING episodes, from envs.registry
    progress: Callable[[str, int, str], None] | None = None  # (capability, attempt, what)
    checks: Any = None  # executor.validation.RaySandboxChecks: self-test + readiness on a Ray Docker node (None: here)


class AttemptSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int
    synthetic_env_id: int
    sha256: str
    status: str
    stage: str
    failed_checks: list[str]
    review: str | None = None  # accept | revise | None (no review)
    rollouts: int = 0
    seconds: float = 0.0
    resumed: bool = False  # verdict read from the store, not computed in this call


class SynthesisResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    capability: str
    status: Status
    attempts: list[AttemptSummary]
    accepted_attempt: int | None = None
    module_path: str | None = None
    reason: str | None = None  # why unsynthesized
    rollouts: int = 0


def module_dir(workspace: Path, run_id: str, capability: str) -> Path:
    return workspace / "synthetic_envs" / run_id / capability


def accepted_module_path(workspace: Path, run_id: str, capability: str) -> Path:
    """Where the accepted module is written (re-run it with `gapforge env validate PATH`)."""
    return workspace / "synthetic_envs" / run_id / f"{capability}.py"


def _open_module(deps: SynthesisDeps, path: Path) -> SandboxedEnv:
    """A generated module in the sandbox: on the caller's pool (leased lazily) or a private one."""
    return SandboxedEnv.pooled(path, deps.pool) if deps.pool is not None else open_env(path, deps.sandbox)


def _write(path: Path, code: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != code:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(code)
        tmp.replace(path)
    return path


def _summary(row: Any, record: dict[str, Any], resumed: bool) -> AttemptSummary:
    verdict = record.get("verdict") or {}
    review = next((c["evidence"].get("verdict") for c in (record.get("report") or {}).get("checks", []) if c["name"] == "llm_review"), None)
    status = "accepted" if verdict.get("accepted") else "rejected" if verdict.get("stage") == "static_gate" else "failed"
    return AttemptSummary(attempt=row.attempt, synthetic_env_id=row.id, sha256=row.sha256, status=status,
                          stage=verdict.get("stage", "?"), failed_checks=verdict.get("failed_checks", []), review=review,
                          rollouts=verdict.get("rollouts", 0), seconds=record.get("seconds", 0.0), resumed=resumed)


def _record(outcome: AttemptOutcome, prompt_id: str) -> dict[str, Any]:
    return {"gate": outcome.gate, "report": outcome.report, "verdict": outcome.verdict.model_dump(mode="json"),
            "feedback": outcome.verdict.feedback(), "seconds": outcome.seconds, "check_seconds": outcome.check_seconds,
            "generator_prompt": prompt_id}


def synthesize_capability(deps: SynthesisDeps, run_id: str, capability: str) -> SynthesisResult:
    """The repair loop for one capability (see the module docstring). Raises LookupError when the
    capability or its LACKING episodes are not stored, ModelError when the generator cannot answer.
    With a policy bound to an event loop (an endpoint's HTTP session), use `asynthesize_capability`."""
    return _repair_loop(deps, run_id, capability, validate_attempt)


async def asynthesize_capability(deps: SynthesisDeps, run_id: str, capability: str) -> SynthesisResult:
    """`synthesize_capability` on the caller's event loop: the repair loop (store, generator, self-test:
    blocking) runs in a worker thread, each attempt's GRPO-readiness rollouts run on this loop, so the
    policy's HTTP session is the caller's to close (`await policy.aclose()` on this loop)."""
    loop = asyncio.get_running_loop()

    def validate_on_loop(*args: Any, **kwargs: Any) -> AttemptOutcome:
        return asyncio.run_coroutine_threadsafe(avalidate_attempt(*args, **kwargs), loop).result()

    return await asyncio.to_thread(_repair_loop, deps, run_id, capability, validate_on_loop)


def _repair_loop(deps: SynthesisDeps, run_id: str, capability: str, validate: Callable[..., AttemptOutcome]) -> SynthesisResult:
    cfg, store = deps.config, deps.store
    say = (lambda attempt, what: deps.progress(capability, attempt, what)) if deps.progress else (lambda attempt, what: None)
    rows = {r.attempt: r for r in store.synthetic_envs(run_id, capability)}
    summaries: list[AttemptSummary] = []
    feedback: str | None = None
    ctx: GeneratorContext | None = None
    shapes = None
    for attempt in range(1, max(cfg.max_attempts, max(rows, default=0)) + 1):
        row = rows.get(attempt)
        stored = store.get_validation(row.id) if row is not None else None
        if stored is not None:  # decided before a restart: reuse
            summary = _summary(row, stored.report, resumed=True)
            summaries.append(summary)
            if row.status != summary.status:
                store.set_synthetic_env_status(row.id, summary.status)
            if summary.status == "accepted":
                return _accepted(deps, run_id, capability, row, summaries)
            feedback = stored.report.get("feedback")
            continue
        if attempt > cfg.max_attempts:
            break
        if ctx is None:
            ctx = gather_context(store, run_id, capability, n_episodes=cfg.episodes_in_prompt,
                                 episode_chars=cfg.episode_chars, target=deps.target)
            shapes = observed_result_shapes(e.messages for e in store.episodes(run_id, env=ctx.target.name)) or None
        prompt = generator_prompt()
        if row is None:
            say(attempt, "generating")
            try:
                generated = generate_env(deps.chat_model, ctx, attempt, cfg.max_attempts, feedback)
            except INFRA_ERRORS as e:
                raise stop(f"synthesis of {capability}", e, _stored(summaries, attempt, generated=False)) from None
            row = store.put_synthetic_env(run_id, capability, attempt, code=generated.code, status="generated",
                                          prompt_name=prompt.name, prompt_version=prompt.version)
        else:
            say(attempt, "resuming: validating the stored code")
        path = _write(module_dir(deps.workspace, run_id, capability) / f"attempt-{attempt}.py", row.code)
        spent = sum(s.rollouts for s in summaries)
        try:
            outcome = validate(
                row.code, path, ctx, attempt, cfg=cfg, open_module=lambda p: _open_module(deps, p), chat_model=deps.chat_model,
                target_shapes=shapes, thresholds=deps.thresholds, policy=deps.policy, run_episode=deps.run_episode,
                readiness=deps.readiness, rollouts_left=cfg.rollout_budget - spent, progress=lambda what, n=attempt: say(n, what),
                checks=deps.checks,
            )
        except INFRA_ERRORS as e:
            say(attempt, "stopped: infrastructure")
            raise stop(f"synthesis of {capability}", e, _stored(summaries, attempt, generated=True)) from None
        record = _record(outcome, f"{prompt.name}@{prompt.version}")
        store.put_validation(row.id, report=record, passed=outcome.verdict.accepted)
        summary = _summary(row, record, resumed=False)
        store.set_synthetic_env_status(row.id, summary.status)
        summaries.append(summary)
        say(attempt, f"{summary.status}" + (f": {', '.join(summary.failed_checks)}" if summary.failed_checks else ""))
        if outcome.verdict.accepted:
            return _accepted(deps, run_id, capability, row, summaries)
        feedback = record["feedback"]
    last = summaries[-1] if summaries else None
    reason = (f"no attempt passed in {len(summaries)}; the last failed at {last.stage}: {', '.join(last.failed_checks)}"
              if last else "no attempt was made (synthesis.max_attempts)")
    return SynthesisResult(run_id=run_id, capability=capability, status="unsynthesized", attempts=summaries,
                           reason=reason, rollouts=sum(s.rollouts for s in summaries))


def _stored(summaries: list[AttemptSummary], attempt: int, *, generated: bool) -> str:
    decided = "attempt 1 keeps its verdict; " if attempt == 2 else f"attempts 1-{attempt - 1} keep their verdicts; " if attempt > 2 else ""
    this = f"attempt {attempt}'s code is stored without a verdict and is validated again on resume" if generated else \
        f"attempt {attempt} is generated again on resume"
    return decided + this


def _accepted(deps: SynthesisDeps, run_id: str, capability: str, row: Any, summaries: list[AttemptSummary]) -> SynthesisResult:
    path = _write(accepted_module_path(deps.workspace, run_id, capability), row.code)
    return SynthesisResult(run_id=run_id, capability=capability, status="accepted", attempts=summaries,
                           accepted_attempt=row.attempt, module_path=str(path), rollouts=sum(s.rollouts for s in summaries))


def synthesis_status(store: Any, run_id: str, capability: str, max_attempts: int) -> tuple[str, str | None]:
    """(accepted | unsynthesized | in_progress | not_started, reason) from what is stored."""
    rows = store.synthetic_envs(run_id, capability)
    if not rows:
        return "not_started", None
    if any(r.status == "accepted" for r in rows):
        return "accepted", None
    decided = [r for r in rows if r.status in ("failed", "rejected")]
    if len(decided) >= max_attempts:
        last = store.get_validation(decided[-1].id)
        verdict = (last.report.get("verdict") or {}) if last else {}
        return "unsynthesized", f"{len(decided)} attempts failed; the last at {verdict.get('stage')}: {', '.join(verdict.get('failed_checks', []))}"
    return "in_progress", None
