"""Episodes keep the env's evidence (score info, step info, user prompt, start time) all
the way into the store; the collector closes no policy it did not create and runs
`concurrency` blocking envs at once."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from gapforge.agents.episode import run_episode
from gapforge.agents.policy import ChatModelPolicy
from gapforge.agents.rollouts import CollectPlan, collect, rollout_summary
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.envs.protocol import Message, Score, StepResult
from gapforge.envs.registry import make_env
from gapforge.store import Store


class _ClosingCounter(ChatModelPolicy):
    closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def _policy() -> _ClosingCounter:
    return _ClosingCounter(
        ScriptedChatModel.from_dict({"policy": {"repeat": "Hello! How can I help?"}}), name="greeter"
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'r.db'}")
    yield s
    s.close()


def test_shop_episode_evidence_reaches_the_store(store: Store) -> None:
    run_id = store.create_run("rollouts", {})
    policy = _policy()
    plan = CollectPlan(run_id=run_id, env="shop", tasks=["shop-refusal-001"], samples=1, concurrency=1, max_turns=30)
    result = asyncio.run(collect(plan, make_env=lambda: make_env("shop"), policy=policy, sink=store))
    ep = store.get_episode(result.episode_ids[0])
    assert ep.score_info["evaluator"].startswith("shop:") and ep.score_info["user"] == "scripted"
    assert "missing_info" in ep.score_info
    assert ep.step_info, "the shop reports its termination in StepResult.info"
    assert ep.step_info[-1]["info"]["termination"] and ep.step_info[-1]["turn"] == ep.turns
    assert ep.started_at is not None and ep.started_at <= ep.created_at
    assert ep.user_prompt is None  # scripted user: no prompt
    assert policy.closed == 0, "collect must not close a policy it did not create"


def test_summaries_carry_no_trajectory(store: Store) -> None:
    run_id = store.create_run("rollouts", {})
    plan = CollectPlan(
        run_id=run_id, env="shop", tasks=["shop-lookup-001", "shop-write-001"], samples=2, concurrency=2, max_turns=2
    )
    asyncio.run(collect(plan, make_env=lambda: make_env("shop"), policy=_policy(), sink=store))
    rows = store.episode_summaries(run_id)
    assert len(rows) == 4 and not hasattr(rows[0], "messages") and not hasattr(rows[0], "step_info")
    assert [r.id for r in rows] == [e.id for e in store.episodes(run_id)]
    assert rows[0].score_info == store.get_episode(rows[0].id).score_info
    assert store.episode_summaries(run_id, env="tau2:retail") == []
    assert len(store.episode_summaries(run_id, success=False)) == sum(not r.success for r in rows)
    summary = rollout_summary(store, run_id, "shop")
    assert summary.episodes == 4 and sum(f.episodes for f in summary.families) == 4


class _BarrierEnv:
    """A blocking env whose reset returns only when `parties` resets run at the same time."""

    name = "barrier"

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    def tools(self) -> list[dict[str, Any]]:
        return []

    def reset(self, task: Any) -> list[Message]:
        self.barrier.wait(timeout=20)  # BrokenBarrierError if fewer threads run at once
        return [Message.user("hi")]

    def step(self, message: Message) -> StepResult:
        return StepResult(done=True, info={"termination": "once"})

    def score(self) -> Score:
        return Score(reward=1.0, success=True, info={"evaluator": "barrier"})

    def close(self) -> None:
        pass

    def task_ids(self) -> list[str]:
        return []

    def task_family(self, task_id: str) -> str:
        return "barrier"


def test_collect_runs_concurrency_blocking_envs_at_once(store: Store) -> None:
    """More blocking resets must overlap than asyncio's default executor has threads (min(32, cpu+4))."""
    n = min(32, (os.cpu_count() or 1) + 4) + 2
    barrier = threading.Barrier(n)
    run_id = store.create_run("rollouts", {})
    plan = CollectPlan(
        run_id=run_id, env="barrier", tasks=[f"t{i}" for i in range(n)], samples=1, concurrency=n, max_turns=1
    )
    result = asyncio.run(collect(plan, make_env=lambda: _BarrierEnv(barrier), policy=_policy(), sink=store))
    assert result.ran == n
    assert {e.termination for e in store.episode_summaries(run_id)} == {"done"}


def test_run_episode_records_step_info_per_turn() -> None:
    barrier = threading.Barrier(1)
    ep = asyncio.run(run_episode(_policy(), _BarrierEnv(barrier), "t0", max_turns=3))
    assert ep.step_info == [{"turn": 1, "info": {"termination": "once"}}]
    assert ep.score_info == {"evaluator": "barrier"}


def test_the_episode_loop_imports_no_langchain() -> None:
    import subprocess

    code = "import sys, agents.episode; print(sorted(m for m in ('langchain_core', 'openai', 'langchain_openai') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2], check=True
    )
    assert out.stdout.strip() == "[]"
