"""`synthesize` and `validate`: one attempt's two steps (agents.synthesis.service); the graph's
capability branch (graph/capability.py) decides which attempt comes next and when to stop.
`synthesize_capability` runs that same loop alone (graph.capability.repair) for `gapforge synthesize`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from gapforge.graph.context import Cost, SynthesisAttempt, ValidationDone

if TYPE_CHECKING:
    from gapforge.agents.synthesis.service import Progress, SynthesisResult
    from gapforge.stages import RunStages


def _progress(sc: RunStages) -> Progress:
    def say(capability: str, attempt: int, what: str) -> None:
        if not what.startswith("check "):  # one line per attempt step, not per self-test check
            sc.progress(f"synthesize {capability}", f"attempt {attempt}: {what}")

    return say


async def synthesize(sc: RunStages, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
    """The generator writes attempt `attempt` (with the previous attempt's feedback), stored; a stored one is reused."""
    from gapforge.agents.synthesis import service

    code = await asyncio.to_thread(service.generate_attempt, sc.deps, run_id, capability, attempt, _progress(sc))
    u = code.usage
    cost = (
        Cost()
        if u is None
        else Cost(llm_calls=u.calls, prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens)
    )
    return SynthesisAttempt(capability, attempt, code.synthetic_env_id, cost=cost)


async def validate(sc: RunStages, run_id: str, capability: str, attempt: int) -> ValidationDone:
    """The attempt's validation (readiness rollouts on this loop, or on a local worker process: executor/validation.py),
    its verdict stored; a stored verdict is reused."""
    from gapforge.agents.synthesis import service

    local = sc.cfg.policy.kind == "local"  # its readiness rollouts decode on this machine's cores (cores.DriverCores)
    with sc.driver_cores.decode() if local else contextlib.nullcontext():
        done = await service.validate_stored_attempt(sc.deps, run_id, capability, attempt, _progress(sc))
    prompt, completion = done.review_tokens
    cost = (
        Cost()
        if done.resumed
        else Cost(
            llm_calls=int(done.review is not None),
            prompt_tokens=prompt,
            completion_tokens=completion,
            policy_rollouts=done.rollouts,
        )
    )
    return ValidationDone(capability, attempt, done.status == "accepted", done.verdict_line(), cost=cost)


async def synthesize_capability(sc: RunStages, run_id: str, capability: str) -> SynthesisResult:
    """The graph's repair loop for one capability, run alone (no training, no checkpointer: the stored attempts and
    verdicts make it resumable), then what it decided."""
    from gapforge.agents.synthesis import service
    from gapforge.graph.capability import repair

    before = await asyncio.to_thread(service.decided_attempts, sc.store, run_id, capability)
    row = await repair(sc, run_id, capability, max_attempts=sc.deps.synthesis.max_attempts)
    error = row.get("error") if row.get("status") == "failed" else None
    return await asyncio.to_thread(
        service.synthesis_result, sc.deps, run_id, capability, decided_before=before, error=error
    )
