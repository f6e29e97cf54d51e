"""Rollouts through the Docker sandbox (the validator's SandboxedEnv): masks, a container killed from outside, no leftovers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapforge.training.envs import EnvSpec, open_factory
from gapforge.training.rollout import run_group
from tests.training.test_tokens import ScriptedSampler

pytestmark = pytest.mark.docker
MODULE = Path(__file__).resolve().parents[2] / "envs" / "examples" / "precondition_verification.py"
TURNS = [
    '<tool_call>\n{"name": "find_customer_by_email", "arguments": {"email": "nobody@example.com"}}\n</tool_call>',
    "Could you tell me your email address?",
    "I cannot do that.",
]


def _mine(client) -> list:
    from gapforge.sandbox.docker_backend import list_containers

    return list_containers(client, f"gapforge.pid={os.getpid()}")


def test_sandboxed_rollouts_mask_env_turns_survive_a_dead_container_and_leave_nothing(docker_client, tiny_tokenizer):
    make_env, close = open_factory(
        EnvSpec(kind="sandbox", module=str(MODULE), sandbox={"backend": "docker"}), pool_size=2
    )
    made = []

    def tracked():
        made.append(make_env())
        return made[-1]

    try:
        ok = run_group(
            tracked,
            7,
            2,
            sampler=ScriptedSampler(tiny_tokenizer, TURNS),
            tokenizer=tiny_tokenizer,
            max_turns=3,
            max_new_tokens=64,
            max_completion_length=8192,
            temperature=1.0,
            env_timeout_s=30,
        )
        assert [r.failure for r in ok] == [None, None] and all(r.turns == 3 for r in ok)
        env_text = tiny_tokenizer.decode([t for t, m in zip(ok[0].traj.completion_ids, ok[0].traj.env_mask) if m == 0])
        assert "customer not found" in env_text  # the sandboxed tool's error, masked from the loss

        class KillAfterFirstTurn(ScriptedSampler):
            def sample(self, contexts, **kw):
                if self.turn == 1:
                    docker_client.containers.get(made[-1].sandbox_id).kill()
                return super().sample(contexts, **kw)

        made.clear()
        (dead,) = run_group(
            tracked,
            8,
            1,
            sampler=KillAfterFirstTurn(tiny_tokenizer, TURNS),
            tokenizer=tiny_tokenizer,
            max_turns=3,
            max_new_tokens=64,
            max_completion_length=8192,
            temperature=1.0,
            env_timeout_s=30,
        )
        # killed from outside: not the env's doing, so the episode is replayed on a fresh container
        assert dead.failure is None and dead.turns == 3
        assert [f["kind"] for f in made[-1].sandbox_faults] == ["killed"] and made[-1].failure_count == 0
    finally:
        close()
    assert _mine(docker_client) == []
