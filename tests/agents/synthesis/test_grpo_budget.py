"""GRPO readiness inside the repair loop: it runs only after every other check passed, its
policy rollouts are counted against the budget, and it stops early once it cannot pass.
(In-process over the hand-written example env -- trusted code -- with a scripted policy runner.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gapforge.agents.synthesis.attempt import validate_attempt
from gapforge.agents.synthesis.config import SynthesisConfig
from gapforge.agents.synthesis.context import GeneratorContext, TargetFacts
from gapforge.config import GRPOReadinessConfig
from gapforge.envs.registry import make_env
from gapforge.envs.synthetic import InProcessSyntheticEnv

EXAMPLE = Path(__file__).parents[3] / "envs" / "examples" / "precondition_verification.py"
BAD = Path(__file__).parent / "bad" / "claims_pay.py"


def context() -> GeneratorContext:
    env = make_env("shop")
    try:
        tools = env.tools()
    finally:
        env.close()
    return GeneratorContext(
        "precondition_verification", "check first", 0.5, 0.3, 1, [], TargetFacts("shop", tools, "policy"), tools
    )


def attempt(path: Path, rewards, rollouts_left: int = 400):
    calls: list[int] = []

    async def run_episode(policy, env, seed, temperature):
        calls.append(seed)
        env.reset(seed)
        return rewards(seed, len(calls))

    outcome = asyncio.run(
        validate_attempt(
            path.read_text(),
            path,
            context(),
            1,
            cfg=SynthesisConfig(review=False, validation_seeds=10),
            open_module=InProcessSyntheticEnv,
            chat_model=None,
            target_shapes=None,
            policy=object(),
            run_episode=run_episode,
            readiness=GRPOReadinessConfig(groups=8, samples=4),
            rollouts_left=rollouts_left,
        )
    )
    return outcome, calls


def test_informative_rewards_pass_and_spend_the_full_matrix() -> None:
    outcome, calls = attempt(EXAMPLE, lambda seed, n: [0.0, 0.3, 0.6, 1.0][n % 4])
    assert outcome.verdict.accepted and outcome.verdict.rollouts == 32 == len(calls)


def test_all_zero_groups_stop_early() -> None:
    outcome, calls = attempt(EXAMPLE, lambda seed, n: 0.0)
    assert not outcome.verdict.accepted and outcome.verdict.failed_checks == ["grpo_ready"]
    # charged: the two groups the verdict read (8 episodes); the episodes of later groups already in flight when it
    # stopped were played but not charged (how many depends on timing)
    assert outcome.verdict.rollouts == 8 <= len(calls) < 32
    grpo = next(c for c in outcome.report["checks"] if c["name"] == "grpo_ready")
    assert "stopped early" in grpo["summary"]


def test_no_rollouts_when_a_cheaper_check_failed_or_the_budget_is_spent() -> None:
    outcome, calls = attempt(BAD, lambda seed, n: 0.5)
    assert calls == [] and "reward_hacking" in outcome.verdict.failed_checks and outcome.verdict.rollouts == 0
    outcome, calls = attempt(EXAMPLE, lambda seed, n: 0.5, rollouts_left=20)
    assert calls == [] and outcome.verdict.failed_checks == ["grpo_ready"]
    assert "budget exhausted" in outcome.verdict.findings[0].summary


async def test_async_attempt_runs_the_readiness_rollouts_on_the_callers_loop() -> None:
    """validate_attempt: the blocking checks leave the loop free; every rollout runs on this loop."""
    loops: list[object] = []

    async def run_episode(policy, env, seed, temperature):
        loops.append(asyncio.get_running_loop())
        n = len(loops)
        await asyncio.to_thread(env.reset, seed)
        return [0.0, 0.3, 0.6, 1.0][n % 4]

    outcome = await validate_attempt(
        EXAMPLE.read_text(),
        EXAMPLE,
        context(),
        1,
        cfg=SynthesisConfig(review=False, validation_seeds=10),
        open_module=InProcessSyntheticEnv,
        chat_model=None,
        target_shapes=None,
        policy=object(),
        run_episode=run_episode,
        readiness=GRPOReadinessConfig(groups=8, samples=4),
        rollouts_left=400,
    )
    assert outcome.verdict.accepted and outcome.verdict.rollouts == 32 == len(loops)
    assert set(loops) == {asyncio.get_running_loop()}


async def test_readiness_concurrency_bounds_the_episodes_in_flight() -> None:
    """grpo_readiness.concurrency=1 plays one episode at a time, so a local policy that seeds each sample by
    its call count samples in a fixed order (the demo's verdicts are reproducible); the default overlaps them."""

    async def peak(concurrency: int) -> int:
        live, top, n = 0, 0, 0
        overlap = asyncio.Event()

        async def run_episode(policy, env, seed, temperature):
            nonlocal live, top, n
            live, n = live + 1, n + 1
            k, top = n, max(top, live)
            if live > 1:
                overlap.set()
            if concurrency > 1:  # hold the first episode until a second one is in flight (fails if none ever is)
                await asyncio.wait_for(overlap.wait(), timeout=10)
            await asyncio.to_thread(env.reset, seed)
            live -= 1
            return [0.0, 0.3, 0.6, 1.0][k % 4]  # a spread in every group: no early stop

        outcome = await validate_attempt(
            EXAMPLE.read_text(),
            EXAMPLE,
            context(),
            1,
            cfg=SynthesisConfig(review=False, validation_seeds=10),
            open_module=InProcessSyntheticEnv,
            chat_model=None,
            target_shapes=None,
            policy=object(),
            run_episode=run_episode,
            readiness=GRPOReadinessConfig(groups=4, samples=4, concurrency=concurrency),
            rollouts_left=400,
        )
        assert outcome.verdict.rollouts == 16
        return top

    assert await peak(1) == 1
    assert await peak(4) > 1
