"""The validation is async: GRPO-readiness rollouts run on the caller's event loop,
so an endpoint policy's HTTP session is created there and closed there by its creator.
(In-process over the hand-written baseline env -- trusted code -- and tests.fakes.fake_openai.)"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from gapforge.agents.episode import run_episode
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.checks import validate_env
from gapforge.sandbox.checks.settings import GRPOReadinessConfig
from gapforge.serving.openai_policy import EndpointPolicy
from tests.fakes.fake_openai import FakeOpenAIServer, text_reply, tool_call_message

BASELINE = Path(__file__).parent / "broken" / "baseline_ok.py"


async def _runner(policy: Any, env: Any, seed: int, temperature: float) -> Any:
    return await run_episode(policy, env, seed, max_turns=5, temperature=temperature)


def _alternating_responder() -> Any:
    """Looks the order up on every other opening turn of the same task, then reports its status; else
    gives up. Counted per opening message, so a group of 4 samples of one task gets 2 of each however
    the groups' requests interleave (one shared count let a group draw 4 odd turns on a busy worker)."""
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text_reply(f"Your order is {json.loads(last['content']).get('status')}.")(body)
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        order = next((w.strip(".,") for w in user.split() if w.startswith("#W")), None)
        with lock:
            counts[user] = counts.get(user, 0) + 1
            look = counts[user] % 2 == 0
        if order and look:
            return tool_call_message("get_order_details", {"order_id": order})
        return text_reply("Sorry, I cannot help.")(body)

    return answer


async def test_readiness_rollouts_use_the_callers_loop_and_its_creator_closes_the_session() -> None:
    cfg = GRPOReadinessConfig(groups=4, samples=4)
    with FakeOpenAIServer(_alternating_responder()) as srv:
        policy = EndpointPolicy(srv.base_url, "fake-model", retry_backoff_s=0.01)
        try:
            report = await validate_env(
                lambda: InProcessSyntheticEnv(BASELINE), seeds=4, policy=policy, run_episode=_runner, readiness=cfg
            )
            session = policy._session
            assert session is not None and not session.closed
            assert policy._loop is asyncio.get_running_loop()  # the session lives on this test's loop
        finally:
            await policy.aclose()  # the creator closes it, on the loop that used it
        assert session.closed
        requests = srv.request_count
    check = report.check("grpo_ready")
    assert check.evidence["rollouts"] == 16 and requests >= 16
    assert [c.name for c in report.checks][-1] == "grpo_ready" and report.passed, report.failed_names()


class _Opened:
    """A stand-in env (the runner below never steps it)."""

    def close(self) -> None:
        pass


async def test_a_groups_long_episode_does_not_hold_the_next_groups_back() -> None:
    """Group 0's first episode ends only once a group-2 episode has started. In waves of concurrency // K
    groups (2 here) group 2 could only start after group 0 ended: the check hung."""
    from gapforge.sandbox.checks.grpo import check_grpo_ready

    later_started = asyncio.Event()

    async def runner(policy: Any, env: Any, seed: int, temperature: float) -> float:
        if seed == 2:
            later_started.set()
        if seed == 0 and not later_started.is_set():
            await later_started.wait()
        return [0.0, 1.0][seed % 2 if seed < 4 else 0] if seed != 1 else 0.5

    cfg = GRPOReadinessConfig(groups=4, samples=2, max_all_zero=1.0, max_all_perfect=1.0, min_informative=0.0)
    result = await asyncio.wait_for(check_grpo_ready(_Opened, [0, 1, 2, 3], object(), runner, cfg, concurrency=4), 10)
    assert result.evidence["groups"] == 4 and result.evidence["rollouts"] == 8


async def test_an_early_stop_grades_the_same_groups_at_any_concurrency() -> None:
    """Groups 1 and 3 are all-zero (limit 20% of 8: the second one decides). Whatever else already played,
    the verdict grades groups 0-3 and the budget is charged their 16 episodes; the episodes played (those of later
    groups already in flight included) depend on timing, so they are reported but not charged."""
    from gapforge.sandbox.checks.grpo import check_grpo_ready

    async def runner(policy: Any, env: Any, seed: int, temperature: float) -> float:
        await asyncio.sleep(0)  # lets the other episodes in flight interleave
        return 0.0 if seed in (1, 3) else 0.5 + 0.1 * (temperature > 2)

    cfg = GRPOReadinessConfig(groups=8, samples=4)
    seen = []
    for concurrency in (1, 4, 12, 32):
        result = await check_grpo_ready(_Opened, list(range(8)), object(), runner, cfg, concurrency=concurrency)
        seen.append(
            (result.summary, result.evidence["rewards"], result.evidence["rollouts"], result.evidence["charged"])
        )
        assert 16 <= result.evidence.get("played", 16) <= 32  # never more than the whole matrix
    assert (
        len(set(map(str, seen))) == 1
        and seen[0][2] == seen[0][3] == 16
        and "stopped early after 4/8 groups" in seen[0][0]
    )
