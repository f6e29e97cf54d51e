"""A training rollout whose env call never returns ends at `training.env_timeout_s`, blamed on the env, and is
masked out of the loss (never a reward of 0); the stuck call's thread is a daemon, abandoned."""

from __future__ import annotations

import threading
import time

from gapforge.envs.protocol import Message, StepResult
from gapforge.training.rollout import run_group
from tests.training.test_tokens import MODEL_TURNS, ScriptedSampler
from tests.training.toy_env import ToyDeskEnv

NEVER = threading.Event()


class _HangsSecond(ToyDeskEnv):
    """The second env instance built blocks forever in its first step."""

    built = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).built += 1
        self.stuck = type(self).built == 2

    def step(self, message: Message) -> StepResult:
        if self.stuck:
            NEVER.wait()
        return super().step(message)


def _play(make_env, k: int, tokenizer, *, env_timeout_s: float) -> list:
    """k rollouts of task 3 with the scripted model turns."""
    return run_group(
        make_env,
        3,
        k,
        sampler=ScriptedSampler(tokenizer, MODEL_TURNS),
        tokenizer=tokenizer,
        max_turns=6,
        max_new_tokens=64,
        max_completion_length=4096,
        temperature=1.0,
        env_timeout_s=env_timeout_s,
    )


def test_a_rollout_whose_step_never_returns_is_dropped_and_masked(tiny_tokenizer) -> None:
    _HangsSecond.built = 0
    t0 = time.monotonic()
    rollouts = _play(_HangsSecond, 3, tiny_tokenizer, env_timeout_s=0.5)
    assert time.monotonic() - t0 < 10.0
    stuck, healthy = rollouts[1], [rollouts[0], rollouts[2]]
    assert stuck.dropped == "env" and "step took longer than 0.5s" in (stuck.failure or "")
    assert set(stuck.traj.env_mask) == {0} and stuck.reward == 0.0  # the loss sees none of it; GRPO never scores it
    assert all(r.dropped is None and r.failure is None and r.turns == 3 for r in healthy)
    waiting = [t for t in threading.enumerate() if t.name.startswith("train-env")]
    assert waiting and all(t.daemon for t in waiting)  # the abandoned call never holds the process at exit


class _StepReturnsDict(ToyDeskEnv):
    def step(self, message: Message) -> dict:  # type: ignore[override]
        return {"messages": [], "done": True}


def test_a_step_that_returns_the_wrong_type_drops_the_rollout_blamed_on_the_env(tiny_tokenizer) -> None:
    (rollout,) = _play(_StepReturnsDict, 1, tiny_tokenizer, env_timeout_s=5.0)  # no AttributeError out of the job
    assert rollout.dropped == "env" and "env.step returned dict, not a StepResult" in (rollout.failure or "")
    assert set(rollout.traj.env_mask) == {0}
