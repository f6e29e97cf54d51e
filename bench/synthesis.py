"""Environment synthesis, offline: time per attempt (and per stage), policy rollouts spent per
accepted env by GRPO readiness, and what the LLM review caught vs the checks.

Runs the recorded shop story (gapforge/demo_data/recordings/shop.yaml) through the real repair
loop in the Docker sandbox, three times:
  1. no policy (GRPO readiness SKIP) -- time per attempt;
  2. a stand-in mid-skill policy (replays the env's reference solution with each action dropped
     with probability 0.35) -- rollouts per accepted env with the full G x K matrix;
  3. the tiny random-weight Qwen3 model (serving/tiny_model.py, LocalPolicy) -- a policy that
     cannot do the task: early exit.
Usage: .venv/bin/python -m bench.synthesis [--seeds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from statistics import mean

from gapforge.agents.config import PolicyConfig
from gapforge.agents.deps import StageDeps
from gapforge.agents.synthesis.config import SynthesisConfig
from gapforge.agents.synthesis.recorded import recorded_synthesis_model
from gapforge.agents.synthesis.service import (
    decided_attempts,
    generate_attempt,
    synthesis_result,
    validate_stored_attempt,
)
from gapforge.graph.capability import repair
from gapforge.graph.context import SynthesisAttempt, ValidationDone
from gapforge.sandbox.checks.probe import action_message
from gapforge.sandbox.checks.settings import GRPOReadinessConfig
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.pool import SandboxPool
from gapforge.store.workspace import Workspace
from tests.agents.synthesis.synth_fixtures import analysed_run, store_at

CAPS = ("precondition_verification", "multi_step_task_completion")


async def noisy_reference(policy, env, seed, temperature):
    """A stand-in policy of middling skill: the reference actions, each dropped with p=0.35."""
    rng = random.Random(f"{seed}:{time.perf_counter_ns()}")
    env.reset(seed)
    for i, action in enumerate(env.solution(seed)):
        if rng.random() < 0.35:
            continue
        if env.step(action_message(action, f"n{i}")).done:
            break
    return env.score().reward


def tiny_runner(tmp: Path):
    from gapforge.agents.policy import run_episode
    from gapforge.serving.local import LocalPolicy
    from gapforge.serving.tiny_model import build_tiny_model

    policy = LocalPolicy(build_tiny_model(tmp / "tiny"), temperature=1.0, max_new_tokens=48)

    async def runner(pol, env, seed, temperature):
        return await run_episode(pol, env, seed, max_turns=3, temperature=temperature)

    return policy, runner


class Steps:
    """The service's two steps as the graph's repair loop calls them (as gapforge/stages/synthesis.py does, which bench/
    may not use: it is the composition root's)."""

    def __init__(self, deps) -> None:
        self.deps = deps

    async def synthesize(self, run, cap, attempt):
        code = await asyncio.to_thread(generate_attempt, self.deps, run, cap, attempt)
        return SynthesisAttempt(cap, attempt, code.synthetic_env_id)

    async def validate(self, run, cap, attempt):
        done = await validate_stored_attempt(self.deps, run, cap, attempt)
        return ValidationDone(cap, attempt, done.status == "accepted", done.verdict_line())


async def synthesize_capability(deps, run, cap):
    """The graph's repair loop (graph.capability.repair) for one capability, then what it decided."""
    before = decided_attempts(deps.store, run, cap)
    row = await repair(Steps(deps), run, cap, max_attempts=deps.synthesis.max_attempts)
    return synthesis_result(deps, run, cap, decided_before=before, error=row.get("error"))


def story(label: str, seeds: int, policy=None, runner=None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-synth-"))
    store = store_at(tmp)
    run = analysed_run(store)
    sandbox = SandboxConfig(memory_mb=256, call_timeout_s=5.0, pool_size=1)
    with SandboxPool(sandbox, size=1) as pool:
        model = recorded_synthesis_model()
        deps = StageDeps(
            open_store=lambda: store,
            open_pool=lambda: pool,
            policy_factory=lambda _cfg: policy,
            chat_model_factory=lambda role: model,
            sandbox=sandbox,
            readiness=GRPOReadinessConfig(),
            synthesis=SynthesisConfig(max_attempts=3, validation_seeds=seeds),
            workspace=Workspace(tmp),
            policy=PolicyConfig(kind="scripted" if policy is None else "local"),
            episode_runner=runner,
        )
        print(f"\n== {label} ({seeds} seeds, max 3 attempts, GRPO readiness G=8 x K=4)")
        print(f"{'capability':28} {'#':>2} {'status':9} {'stage':12} {'s':>6} {'rollouts':>8}  failed checks / review")
        per_attempt: list[float] = []
        for cap in CAPS:
            t0 = time.perf_counter()
            result = asyncio.run(synthesize_capability(deps, run, cap))
            for a in result.attempts:
                per_attempt.append(a.seconds) if a.stage != "static_gate" else None
                print(
                    f"{cap:28} {a.attempt:>2} {a.status:9} {a.stage:12} {a.seconds:6.2f} {a.rollouts:>8}  "
                    f"{', '.join(a.failed_checks) or '-'} / review {a.review or '-'}"
                )
            print(
                f"{cap:28} -> {result.status}, {result.rollouts} rollouts, {time.perf_counter() - t0:.1f} s"
                + (f" ({result.reason})" if result.reason else "")
            )
        rows = [r for cap in CAPS for r in store.synthetic_envs(run, cap)]
        stages: dict[str, list[float]] = {}
        for r in rows:
            v = store.get_validation(r.id)
            for name, s in (v.report.get("check_seconds") or {}).items():
                stages.setdefault(name, []).append(s)
        print(
            f"sandboxed attempts: mean {mean(per_attempt):.2f} s per attempt over {len(per_attempt)};"
            " per check (mean s): " + ", ".join(f"{k} {mean(v):.2f}" for k, v in stages.items())
        )
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--skip-tiny", action="store_true")
    args = ap.parse_args()
    story("no policy", args.seeds)
    story("stand-in mid-skill policy (noisy reference)", args.seeds, object(), noisy_reference)
    if not args.skip_tiny:
        with tempfile.TemporaryDirectory() as tmp:
            policy, runner = tiny_runner(Path(tmp))
            story("tiny random-weight model (LocalPolicy)", args.seeds, policy, runner)
    print("\nreference calibration of the TRACE code: 1,600 policy rollouts per env; budget here: 400 per capability")


if __name__ == "__main__":
    main()
