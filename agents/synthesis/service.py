"""Stage service: one attempt at one capability's synthetic env, in two steps the graph calls
in turn (graph/capability.py owns the repair loop: which attempt comes next, when to stop):

    code = generate_attempt(deps, run_id, capability, attempt)      # the generator writes attempt N
    summary = await validate_stored_attempt(deps, run_id, capability, attempt)    # its validation

Every attempt is stored before it is validated (synthetic_envs: code, sha256, status
generated -> rejected | failed | accepted) and its verdict after (validations: the gate, the
self-test report, the review, the verdict, the feedback, rollouts, timings). Both steps are
idempotent: a stored attempt is not generated again, a stored verdict is not computed again, so
a kill at any point resumes at the step it was in. Attempt N's generator reads attempt N-1's
stored feedback. An endpoint (generator, reviewer, readiness policy) or a sandbox that keeps
failing past its retries is never an attempt's verdict: the step stops with IncompleteStage
(agents/infra.py: exit 3), the attempt's code stays stored without a verdict and a resume
validates it again. Never prints; progress goes to the `progress` callback.
`synthesis_result` reads back what the loop decided (the standalone `gapforge synthesize` command
runs the graph's own loop, graph/capability.py `repair`). Generated code runs only in the sandbox: every module is opened
with `SandboxedEnv.pooled(path, deps.sandbox_pool)`, or, with `deps.sandbox_checks`
(executor/: Ray), in the sandbox of a Docker node of the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from gapforge.agents.analysis.usage import UsageCounter
from gapforge.agents.deps import StageDeps
from gapforge.agents.infra import INFRA_ERRORS, stop
from gapforge.agents.synthesis.attempt import AttemptOutcome, validate_attempt
from gapforge.agents.synthesis.config import EPISODE_CHARS, EPISODES_IN_PROMPT
from gapforge.agents.synthesis.context import GeneratorContext, gather_context
from gapforge.agents.synthesis.generator import generate_env, generator_prompt
from gapforge.agents.validation import readiness_runner
from gapforge.sandbox.checks.result_shapes import observed_result_shapes
from gapforge.sandbox.env import SandboxedEnv

if TYPE_CHECKING:
    from gapforge.store import Store

Status = Literal["accepted", "unsynthesized"]
Progress = Callable[[str, int, str], None]  # (capability, attempt, what)


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
    review_tokens: tuple[int, int] = (0, 0)  # the LLM review's prompt and completion tokens

    def verdict_line(self) -> str:
        """`passed`, or where it failed and which checks."""
        failed = ", ".join(self.failed_checks)
        return "passed" if self.status == "accepted" else f"failed at {self.stage}" + (f": {failed}" if failed else "")


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


@dataclass(frozen=True)
class AttemptCode:
    """Attempt N's stored code (`generated`: the generator wrote it in this call)."""

    synthetic_env_id: int
    generated: bool
    usage: UsageCounter | None = None  # the generator's calls and tokens, when it wrote the code in this call


def _write(path: Path, code: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != code:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(code)
        tmp.replace(path)
    return path


def _say(progress: Progress | None, capability: str) -> Callable[[int, str], None]:
    return (lambda attempt, what: progress(capability, attempt, what)) if progress else (lambda attempt, what: None)


def _row(deps: StageDeps, run_id: str, capability: str, attempt: int) -> Any:
    return next((r for r in deps.store.synthetic_envs(run_id, capability) if r.attempt == attempt), None)


def _context(deps: StageDeps, run_id: str, capability: str) -> GeneratorContext:
    return gather_context(
        deps.store,
        run_id,
        capability,
        n_episodes=EPISODES_IN_PROMPT,
        episode_chars=EPISODE_CHARS,
        unseen_env=deps.unseen_env,
    )


def generate_attempt(
    deps: StageDeps, run_id: str, capability: str, attempt: int, progress: Progress | None = None
) -> AttemptCode:
    """Attempt `attempt`'s code: the stored one, or the generator's answer (with attempt N-1's feedback), stored.
    Raises LookupError when the capability or its LACKING episodes are not stored, ModelError when the
    generator cannot answer, IncompleteStage when its endpoint kept failing."""
    store, say = deps.store, _say(progress, capability)
    row = _row(deps, run_id, capability, attempt)
    if row is not None:
        return AttemptCode(row.id, generated=False)
    previous = _row(deps, run_id, capability, attempt - 1) if attempt > 1 else None
    stored = store.get_validation(previous.id) if previous is not None else None
    feedback = stored.report.get("feedback") if stored is not None else None
    ctx = _context(deps, run_id, capability)
    prompt = generator_prompt()
    say(attempt, "generating")
    usage = UsageCounter()
    try:
        generated = generate_env(
            deps.make_chat_model("synthesis"), ctx, attempt, deps.synthesis.max_attempts, feedback, usage
        )
    except INFRA_ERRORS as e:
        raise stop(f"synthesis of {capability}", e, _stored(attempt, generated=False)) from None
    row = store.put_synthetic_env(
        run_id,
        capability,
        attempt,
        code=generated.code,
        status="generated",
        prompt_name=prompt.name,
        prompt_version=prompt.version,
    )
    return AttemptCode(row.id, generated=True, usage=usage)


def _prepare(
    deps: StageDeps, run_id: str, capability: str, attempt: int
) -> tuple[Any, Any, AttemptSummary | None, dict[str, Any]]:
    """(row, stored validation or None, its summary, the validation's arguments) of a generated attempt."""
    store, cfg = deps.store, deps.synthesis
    row = _row(deps, run_id, capability, attempt)
    if row is None:
        raise LookupError(f"attempt {attempt} of {capability} is not stored: generate it first")
    stored = store.get_validation(row.id)
    if stored is not None:
        return row, stored, _summary(row, stored.report, resumed=True), {}
    ctx = _context(deps, run_id, capability)
    shapes = observed_result_shapes(e.messages for e in store.episodes(run_id, env=ctx.target.name)) or None
    earlier = [store.get_validation(r.id) for r in store.synthetic_envs(run_id, capability) if r.attempt < attempt]
    spent = sum((v.report.get("verdict") or {}).get("rollouts", 0) for v in earlier if v is not None)
    path = _write(deps.workspace.attempt_module(run_id, capability, attempt), row.code)
    policy = deps.readiness_policy()
    args = {
        "code": row.code,
        "module_path": path,
        "ctx": ctx,
        "attempt": attempt,
        "cfg": cfg,
        # the pool opens on first use: with `deps.sandbox_checks` (a Ray Docker node) this machine opens no sandbox
        "open_module": lambda p: SandboxedEnv.pooled(p, deps.sandbox_pool),
        "chat_model": deps.make_chat_model("synthesis"),
        "target_shapes": shapes,
        "thresholds": deps.self_test,
        "policy": policy,
        "readiness": deps.readiness,
        "rollouts_left": cfg.rollout_budget - spent,
        "checks": deps.sandbox_checks,
        "run_episode": (deps.episode_runner or readiness_runner(deps.rollouts.max_turns))
        if policy is not None
        else None,
    }
    return row, None, None, args


def _decide(
    deps: StageDeps,
    run_id: str,
    capability: str,
    row: Any,
    stored: Any,
    summary: AttemptSummary,
    say: Callable[[int, str], None],
) -> AttemptSummary:
    if row.status != summary.status:
        deps.store.set_synthetic_env_status(row.id, summary.status)
    if summary.status == "accepted":
        _write(deps.workspace.synthetic_env(run_id, capability), row.code)
    if stored is None:
        say(
            row.attempt,
            f"{summary.status}" + (f": {', '.join(summary.failed_checks)}" if summary.failed_checks else ""),
        )
    return summary


def _record_outcome(deps: StageDeps, row: Any, outcome: AttemptOutcome) -> AttemptSummary:
    prompt = generator_prompt()
    record = _record(outcome, f"{prompt.name}@{prompt.version}")
    deps.store.put_validation(row.id, report=record, passed=outcome.verdict.accepted)
    return _summary(row, record, resumed=False)


async def validate_stored_attempt(
    deps: StageDeps, run_id: str, capability: str, attempt: int, progress: Progress | None = None
) -> AttemptSummary:
    """The validation of attempt `attempt`'s stored code in the sandbox (or its stored verdict), stored with the
    verdict; an accepted module is written to `deps.workspace.synthetic_env(run, capability)`. Store, gate, self-test
    and review run in worker threads, the GRPO-readiness rollouts on this loop (the policy's HTTP session is the loop
    owner's to close)."""
    say = _say(progress, capability)
    row, stored, summary, args = await asyncio.to_thread(_prepare, deps, run_id, capability, attempt)
    if summary is None:
        say(attempt, "validating")
        try:
            outcome = await validate_attempt(**args, progress=lambda what: say(attempt, what))
        except INFRA_ERRORS as e:
            say(attempt, "stopped: infrastructure")
            raise stop(f"synthesis of {capability}", e, _stored(attempt, generated=True)) from None
        summary = await asyncio.to_thread(_record_outcome, deps, row, outcome)
    return await asyncio.to_thread(_decide, deps, run_id, capability, row, stored, summary, say)


def synthesis_result(
    deps: StageDeps, run_id: str, capability: str, *, decided_before: Collection[int] = (), error: str | None = None
) -> SynthesisResult:
    """What the repair loop (graph/capability.py) decided for a capability, read from the store: every attempt with a
    verdict (`resumed` when its verdict was stored before the loop ran: its id in `decided_before`), accepted or not
    and why (`error`: the loop's own reason for stopping, e.g. a failed step)."""
    store = deps.store
    summaries = []
    for row in sorted(store.synthetic_envs(run_id, capability), key=lambda r: r.attempt):
        stored = store.get_validation(row.id)
        if stored is not None:
            summaries.append(_summary(row, stored.report, resumed=row.id in decided_before))
    rollouts = sum(s.rollouts for s in summaries)
    accepted = next((s for s in summaries if s.status == "accepted"), None)
    if accepted is not None and error is None:
        return SynthesisResult(
            run_id=run_id,
            capability=capability,
            status="accepted",
            attempts=summaries,
            accepted_attempt=accepted.attempt,
            module_path=str(deps.workspace.synthetic_env(run_id, capability)),
            rollouts=rollouts,
        )
    last = summaries[-1] if summaries else None
    reason = error or (
        f"no attempt passed in {len(summaries)}; the last failed at {last.stage}: {', '.join(last.failed_checks)}"
        if last
        else "no attempt was made (synthesis.max_attempts)"
    )
    return SynthesisResult(
        run_id=run_id,
        capability=capability,
        status="unsynthesized",
        attempts=summaries,
        reason=reason,
        rollouts=rollouts,
    )


def decided_attempts(store: Store, run_id: str, capability: str) -> set[int]:
    """The ids of the capability's attempts that have a stored verdict."""
    return {r.id for r in store.synthetic_envs(run_id, capability) if store.get_validation(r.id) is not None}


def _summary(row: Any, record: dict[str, Any], resumed: bool) -> AttemptSummary:
    verdict = record.get("verdict") or {}
    review = next(
        (
            c["evidence"].get("verdict")
            for c in (record.get("report") or {}).get("checks", [])
            if c["name"] == "llm_review"
        ),
        None,
    )
    status = (
        "accepted" if verdict.get("accepted") else "rejected" if verdict.get("stage") == "static_gate" else "failed"
    )
    return AttemptSummary(
        attempt=row.attempt,
        synthetic_env_id=row.id,
        sha256=row.sha256,
        status=status,
        stage=verdict.get("stage", "?"),
        failed_checks=verdict.get("failed_checks", []),
        review=review,
        rollouts=verdict.get("rollouts", 0),
        seconds=record.get("seconds", 0.0),
        resumed=resumed,
        review_tokens=tuple(record.get("review_tokens") or (0, 0)),
    )


def _record(outcome: AttemptOutcome, prompt_id: str) -> dict[str, Any]:
    return {
        "gate": outcome.gate,
        "report": outcome.report,
        "verdict": outcome.verdict.model_dump(mode="json"),
        "feedback": outcome.verdict.feedback(),
        "seconds": outcome.seconds,
        "review_tokens": list(outcome.review_tokens),
        "check_seconds": outcome.check_seconds,
        "generator_prompt": prompt_id,
    }


def _stored(attempt: int, *, generated: bool) -> str:
    decided = (
        "attempt 1 keeps its verdict; "
        if attempt == 2
        else f"attempts 1-{attempt - 1} keep their verdicts; "
        if attempt > 2
        else ""
    )
    this = (
        f"attempt {attempt}'s code is stored without a verdict and is validated again on resume"
        if generated
        else f"attempt {attempt} is generated again on resume"
    )
    return decided + this
