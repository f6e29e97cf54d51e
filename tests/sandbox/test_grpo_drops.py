"""GRPO readiness leaves out what is not a reward: an episode ended by the env's code (`env_error`) or by its
time limit is dropped from its group and counted, never graded as 0."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gapforge.envs.errors import InfrastructureFailure
from gapforge.envs.sampling import episode_key
from gapforge.sandbox.checks.grpo import check_grpo_ready
from gapforge.sandbox.checks.settings import GRPOReadinessConfig

CFG = GRPOReadinessConfig(
    groups=2,
    samples=3,
    min_informative=0.0,
    max_all_zero=1.0,
    max_all_perfect=1.0,
    mean_low=0.0,
    mean_high=1.0,
    episode_timeout_s=0.5,
)


class _Env:
    def close(self) -> None:
        pass


def _runner(plays: dict[str, Any]):
    """Each episode's outcome by its key (`grpo_ready:<seed>#<sample>`): a reward, a termination, or 'hang'."""

    async def run(policy: Any, env: Any, seed: int, temperature: float) -> Any:
        what = plays[episode_key.get()]
        if what == "hang":
            await asyncio.Event().wait()
        if isinstance(what, str):
            return SimpleNamespace(reward=0.0, termination=what, error=f"{what} at seed {seed}")
        return SimpleNamespace(reward=what, termination="done", error=None)

    return run


def _check(plays: dict[str, Any]):
    return asyncio.run(check_grpo_ready(_Env, [0, 1], object(), _runner(plays), CFG, concurrency=6, early_exit=False))


def test_an_env_error_is_dropped_from_its_group_not_scored_zero() -> None:
    plays = {
        "grpo_ready:0#0": 1.0,
        "grpo_ready:0#1": 0.5,
        "grpo_ready:0#2": "env_error",
        "grpo_ready:1#0": 1.0,
        "grpo_ready:1#1": 0.0,
        "grpo_ready:1#2": 1.0,
    }
    result = _check(plays)
    assert (
        not result.passed and "env env_error during a policy episode at seed 0" in result.summary
    )  # the env's bug, named
    assert result.evidence["rewards"] == {"0": [1.0, 0.5]}  # the group holds no 0.0 for it
    assert result.evidence["dropped"] == {"env_error": 1} and result.evidence["rollouts"] == 2


def test_a_timed_out_episode_is_dropped_and_its_group_graded_on_the_rest() -> None:
    plays = {
        "grpo_ready:0#0": 1.0,
        "grpo_ready:0#1": 0.5,
        "grpo_ready:0#2": "hang",
        "grpo_ready:1#0": 1.0,
        "grpo_ready:1#1": 0.0,
        "grpo_ready:1#2": "timeout",
    }
    result = _check(plays)
    assert result.passed, result.summary
    assert result.evidence["rewards"] == {"0": [1.0, 0.5], "1": [1.0, 0.0]} and result.evidence["mean_reward"] == 0.625
    assert result.evidence["dropped"] == {"timeout": 2} and result.evidence["played"] == 6


def test_when_every_episode_times_out_the_check_stops_as_infrastructure() -> None:
    with pytest.raises(
        InfrastructureFailure, match="no readiness episode finished within grpo_readiness.episode_timeout_s=0.5 s"
    ):
        _check({f"grpo_ready:{s}#{k}": "hang" for s in (0, 1) for k in range(3)})
