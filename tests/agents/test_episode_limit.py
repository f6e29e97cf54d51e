"""agents.config.episode_limit_s: an episode's time limit derived from the turn limit and the call timeouts, so a hang
is noticed in minutes while the slowest honest episode (an endpoint policy and an LLM user at their timeouts) fits."""

from __future__ import annotations

import pytest

from gapforge.agents.config import episode_limit_s
from gapforge.config import load_config


def limit(*overrides: str, env_turns: int | None = None) -> float:
    cfg = load_config(None, list(overrides), environ={})
    return episode_limit_s(cfg.rollouts, cfg.policy, cfg.llm, env_turns)


def test_recorded_answers_and_a_scripted_user_give_minutes_not_half_an_hour() -> None:
    assert limit() == 30 * (1.0 + 10.0)  # 30 turns x (a recorded answer + an env call)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["policy.kind=local", "policy.local_path=/m"], 30 * (60.0 + 10.0)),
        (["policy.kind=endpoint", "policy.endpoint.timeout_s=90"], 30 * (90.0 + 10.0)),
        # an LLM user answers every turn too, at its endpoint's timeout (llm.endpoint, or the served policy's)
        (["policy.kind=endpoint", "rollouts.user=llm", "llm.endpoint.timeout_s=45"], 30 * (120.0 + 45.0 + 10.0)),
        (["policy.kind=endpoint", "rollouts.user=llm", "rollouts.user_endpoint=policy"], 30 * (120.0 + 120.0 + 10.0)),
        (["rollouts.max_turns=8", "rollouts.env_call_s=30"], 8 * (1.0 + 30.0)),
    ],
)
def test_each_turn_may_take_its_calls_at_their_timeouts(overrides: list[str], expected: float) -> None:
    assert limit(*overrides) == expected


def test_an_env_with_more_turns_of_its_own_gets_them() -> None:
    """τ² envs carry their own step limit, which the episode loop never cuts below rollouts.max_turns."""
    assert limit("policy.kind=endpoint", "rollouts.user=llm", env_turns=50) == 50 * (120.0 + 120.0 + 10.0)
    assert limit(env_turns=5) == limit()  # fewer than rollouts.max_turns: the config's limit stands


def test_a_set_limit_wins_and_a_derived_one_is_clamped() -> None:
    assert limit("rollouts.episode_timeout_s=0.5", "policy.kind=endpoint") == 0.5
    assert limit("rollouts.max_turns=1") == 60.0  # at least a minute
    assert limit("rollouts.max_turns=1000", "policy.kind=endpoint", "policy.endpoint.timeout_s=600") == 86400.0
