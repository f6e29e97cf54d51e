"""`synthesize` and `validate`: one attempt's two steps (agents.synthesis.service); the graph's
capability branch (graph/capability.py) decides which attempt comes next and when to stop."""

from __future__ import annotations

import asyncio
import contextlib

from gapforge.stages.common import StageContext, require
from graph.context import Cost, SynthesisAttempt, ValidationDone


def _progress(sc: StageContext):
    def say(capability: str, attempt: int, what: str) -> None:
        if not what.startswith("check "):  # one line per attempt step, not per self-test check
            sc.progress(f"synthesize {capability}", f"attempt {attempt}: {what}")

    return say


async def synthesize(sc: StageContext, run_id: str, capability: str, attempt: int) -> SynthesisAttempt:
    """The generator writes attempt `attempt` (with the previous attempt's feedback), stored; a stored one is reused."""
    service = require("agents.synthesis.service", "environment synthesis")
    code = await asyncio.to_thread(service.generate_attempt, sc.deps, run_id, capability, attempt, _progress(sc))
    return SynthesisAttempt(capability, attempt, code.synthetic_env_id, cost=Cost(llm_calls=int(code.generated)))


async def validate(sc: StageContext, run_id: str, capability: str, attempt: int) -> ValidationDone:
    """The attempt's self-test in the sandbox (readiness rollouts on this loop, or on a local readiness worker process:
    executor/readiness.py), its verdict stored; a stored verdict is reused."""
    service = require("agents.synthesis.service", "environment synthesis")
    local = sc.cfg.policy.kind == "local"  # its readiness rollouts decode on this machine's cores (cores.DriverCores)
    with sc.driver_cores.decode() if local else contextlib.nullcontext():
        done = await service.avalidate_stored_attempt(sc.deps, run_id, capability, attempt, _progress(sc))
    cost = Cost() if done.resumed else Cost(llm_calls=int(done.review is not None), policy_rollouts=done.rollouts)
    return ValidationDone(capability, attempt, done.status == "accepted", done.verdict_line(), cost=cost)
