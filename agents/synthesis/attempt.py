"""Validate one generated module: static gate -> self-test in the sandbox -> LLM review -> GRPO readiness (policy
rollouts, only when everything else passed and budget remains). The outcome is one `AttemptVerdict` whose
`feedback()` goes back to the generator (which check failed, on which seed, what happened, the reviewer's fixes).
The infrastructure never decides a verdict: a self-test the sandbox left incomplete, or readiness episodes the
endpoint / sandbox kept ending, raise InfrastructureFailure (or SandboxLost); the service stops the stage
(agents/infra.py) and the attempt is validated again on resume.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field

from gapforge.agents.analysis.usage import UsageCounter
from gapforge.agents.synthesis.config import SynthesisConfig
from gapforge.agents.synthesis.context import GeneratorContext
from gapforge.agents.synthesis.reviewer import review_check, review_env
from gapforge.agents.synthesis.static_gate import static_gate
from gapforge.agents.validation import SandboxChecks
from gapforge.envs.errors import InfrastructureFailure
from gapforge.envs.protocol import PolicyModel
from gapforge.sandbox.checks import SelfTestThresholds, validate_env
from gapforge.sandbox.checks.grpo import EpisodeRunner, check_grpo_ready
from gapforge.sandbox.checks.probe import ValidatedEnv
from gapforge.sandbox.checks.report import CheckResult, ValidationReport, evidence_for_generator
from gapforge.sandbox.checks.result_shapes import Shape

OpenModule = Callable[[Path], ValidatedEnv]


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    check: str
    summary: str
    evidence: str = ""


class AttemptVerdict(BaseModel):
    """The structured verdict on one attempt; stored with the attempt and sent to the generator."""

    model_config = ConfigDict(extra="forbid")

    accepted: bool
    stage: str = Field(description="where the attempt ended: static_gate | self_test | review | grpo_ready | accepted")
    failed_checks: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list, description="the reviewer's fix instructions")
    rollouts: int = 0

    def feedback(self, max_chars: int = 5000) -> str:
        if self.accepted:
            return "accepted"
        lines = [f"Your previous module was rejected at stage `{self.stage}`."]
        for f in self.findings:
            lines.append(f"- check `{f.check}` FAILED: {f.summary}")
            if f.evidence:
                lines.append(f"  evidence: {f.evidence}")
        if self.fixes:
            lines.append("Reviewer's fixes:")
            lines += [f"- {fix}" for fix in self.fixes]
        lines.append("Write the whole module again with these problems fixed.")
        text = "\n".join(lines)
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


class AttemptOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: AttemptVerdict
    gate: dict[str, Any]
    report: dict[str, Any] | None = None
    seconds: float = 0.0
    check_seconds: dict[str, float] = Field(default_factory=dict)
    review_tokens: tuple[int, int] = (0, 0)  # the LLM review's prompt and completion tokens (pricing)


def findings(failures: list[CheckResult]) -> list[Finding]:
    """What the generator is told of failed checks: each one's summary and shortened evidence; a check blocked by an
    earlier failure (it did not run) is left out."""
    return [
        Finding(check=c.name, summary=c.summary[:600], evidence=evidence_for_generator(c.evidence))
        for c in failures
        if "blocked_by" not in c.evidence
    ]


async def validate_attempt(
    code: str,
    module_path: Path,
    ctx: GeneratorContext,
    attempt: int,
    *,
    cfg: SynthesisConfig,
    open_module: OpenModule,
    chat_model: BaseChatModel,
    target_shapes: dict[str, Shape] | None,
    thresholds: SelfTestThresholds | None = None,
    policy: PolicyModel | None = None,
    run_episode: EpisodeRunner | None = None,
    readiness: Any = None,
    rollouts_left: int = 0,
    progress: Callable[[str], None] | None = None,
    checks: SandboxChecks | None = None,
) -> AttemptOutcome:
    """Run every gate on one module. `open_module` opens the env: the synthesis service always passes
    the sandbox (sandbox.env.open_env); only tests pass trusted in-process example envs.
    `checks` (executor/validation.py) runs the self-test and the readiness rollouts on a Docker node of a Ray
    cluster, or the readiness rollouts on a local worker process, instead of through `open_module` here.
    Gate, self-test and review run in worker threads, the GRPO-readiness rollouts on this loop (the policy's
    HTTP session stays its creator's)."""
    started = time.perf_counter()
    open_env = functools.partial(open_module, module_path)
    gate = await asyncio.to_thread(static_gate, code)
    if not gate.passed:
        finding = Finding(check="static_gate", summary="; ".join(gate.problems)[:600])
        verdict = AttemptVerdict(accepted=False, stage="static_gate", failed_checks=["static_gate"], findings=[finding])
        return AttemptOutcome(verdict=verdict, gate=gate.to_json(), seconds=round(time.perf_counter() - started, 3))
    if progress:
        progress("self-test in the sandbox")
    run = validate_env if checks is None else checks.validate_env
    report: ValidationReport = await run(
        open_env,
        target_tools=ctx.target.tools,
        seeds=cfg.validation_seeds,
        thresholds=thresholds,
        module=module_path,
        target=ctx.target.name,
        target_result_shapes=target_shapes,
        split_texts=ctx.split_texts,  # the run's held-out openings: check contamination (skipped when the run has no split)
        progress=(lambda name: progress(f"check {name}")) if progress else None,
    )
    if report.incomplete is not None:  # no verdict: not the env's doing
        stopped = report.incomplete
        raise InfrastructureFailure(stopped["cause"], f"self-test check {stopped['check']}: {stopped['error']}")
    review_tokens = (0, 0)
    if cfg.review:
        if progress:
            progress("LLM review")
        t0 = time.perf_counter()
        usage = UsageCounter()
        review = review_check(await asyncio.to_thread(review_env, chat_model, ctx, code, attempt, usage))
        review_tokens = (usage.prompt_tokens, usage.completion_tokens)
        review.seconds = round(time.perf_counter() - t0, 3)
        report.checks.insert(len(report.checks) - 1, review)  # before grpo_ready
    failures = report.failures
    stage = "self_test" if any(c.name != "llm_review" for c in failures) else "review" if failures else "grpo_ready"
    grpo: CheckResult | None = None  # None: the check stays as the self-test left it
    if not failures and policy is not None and run_episode is not None:
        if readiness is None:
            raise ValueError(
                "a policy for GRPO readiness needs its thresholds (readiness: the config's grpo_readiness section)"
            )
        need = readiness.groups * readiness.samples
        if need > rollouts_left:
            why = f"rollout budget exhausted: {rollouts_left} left, the check needs up to {need}"
            grpo = CheckResult.fail("grpo_ready", why, rollouts_left=rollouts_left)
        else:
            if progress:
                progress("GRPO readiness (policy rollouts)")
            t0 = time.perf_counter()
            ready = check_grpo_ready if checks is None else checks.readiness_for(module_path)
            seeds = list(range(cfg.validation_seeds))
            grpo = await ready(open_env, seeds, policy, run_episode, readiness, concurrency=readiness.concurrency)
            grpo.seconds = round(time.perf_counter() - t0, 3)
    rollouts = 0
    if grpo is not None:
        rollouts = int(grpo.evidence.get("charged", grpo.evidence.get("rollouts", 0)))  # sandbox/checks/grpo.py
        report.checks[-1] = grpo
    failures = report.failures
    verdict = AttemptVerdict(
        accepted=not failures,
        stage="accepted" if not failures else stage,
        failed_checks=[c.name for c in failures],
        findings=findings(failures),
        fixes=list(next((c.evidence.get("fixes", []) for c in failures if c.name == "llm_review"), [])),
        rollouts=rollouts,
    )
    return AttemptOutcome(
        verdict=verdict,
        gate=gate.to_json(),
        report=report.to_json(),
        seconds=round(time.perf_counter() - started, 3),
        check_seconds={c.name: c.seconds for c in report.checks},
        review_tokens=review_tokens,
    )
