"""Parity with τ²-bench: the same scripted agent and user through the adapter and through tau2's own
orchestrator + evaluator give equal rewards and termination reasons (envs/tau2/reference.py).

Default suite: a representative subset (gold replays incl. transfer tasks, a looping agent hitting the
step limit, an erroring agent hitting the error limit, every step-limit boundary of one telecom and one
retail task). The sweep over every task of retail, airline and telecom is opt-in (minutes):
    GAPFORGE_TAU2_FULL=1 pytest -m tau2_full tests/envs/test_tau2_parity.py
"""

from __future__ import annotations

import functools
import os

import pytest

pytest.importorskip("tau2")

from envs.protocol import Message
from envs.tau2 import Tau2Env
from envs.tau2.reference import gold_script, run_adapter, run_orchestrator

pytestmark = pytest.mark.tau2

TELECOM_DATA = "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]"
TELECOM_TRANSFER = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"
SUBSET = {  # gold replays; retail 10/26 and airline 13 end with a transfer to a human
    "retail": ["0", "10", "26"],
    "airline": ["8", "13"],
    "telecom": [TELECOM_DATA, TELECOM_TRANSFER],
}
FULL = os.environ.get("GAPFORGE_TAU2_FULL") == "1"


@functools.cache
def env(domain: str, max_steps: int = 200) -> Tau2Env:
    return Tau2Env(domain, max_steps=max_steps)


def assert_parity(e: Tau2Env, task_id: str, tail: str) -> tuple[float, str]:
    script = gold_script(e, task_id, tail)  # type: ignore[arg-type]
    ours, theirs = run_adapter(e, task_id, script), run_orchestrator(e, task_id, script)
    assert ours == theirs, f"{e.name} task {task_id} ({tail}, max_steps={e.max_steps}): adapter {ours} != tau2 {theirs}"
    return ours


@pytest.mark.parametrize("domain,task_id", [(d, t) for d, ids in SUBSET.items() for t in ids])
def test_gold_replays_match_tau2(domain, task_id):
    assert assert_parity(env(domain), task_id, "answer") == (1.0, "user_stop")


@pytest.mark.parametrize("domain,task_id", [("retail", "5"), ("airline", "11"), ("telecom", TELECOM_DATA)])
def test_looping_agent_hits_tau2s_step_limit_in_both(domain, task_id):
    # gold actions done, then a read call forever: tau2 gives 0 (the old 30-turn cap scored this 1.0)
    assert assert_parity(env(domain), task_id, "loop") == (0.0, "max_steps")


@pytest.mark.parametrize("domain,task_id", [("retail", "0"), ("telecom", TELECOM_TRANSFER)])
def test_erroring_agent_hits_tau2s_error_limit_in_both(domain, task_id):
    assert assert_parity(env(domain), task_id, "errors") == (0.0, "too_many_errors")


def test_every_step_limit_boundary_matches_tau2_on_telecom():
    """max_steps at every step of a replay with agent calls, user device calls and text turns."""
    outcomes = {assert_parity(env("telecom", n), TELECOM_DATA, "answer") for n in range(2, 24)}
    assert outcomes == {(0.0, "max_steps"), (1.0, "user_stop")}


@pytest.mark.parametrize("max_steps", [2, 3, 4, 5])
def test_step_limit_boundaries_match_tau2_on_retail(max_steps):
    assert assert_parity(env("retail", max_steps), "0", "answer") == (0.0, "max_steps")


def test_do_nothing_scores_zero_on_telecom_in_both():
    e = env("telecom")

    def idle():
        while True:
            yield Message.assistant("How can I help you today?")

    for task_id in SUBSET["telecom"]:
        assert run_adapter(e, task_id, idle) == run_orchestrator(e, task_id, idle) == (0.0, "user_stop")


@pytest.mark.tau2_full
@pytest.mark.timeout(3600)  # one domain's full sweep exceeds the suite's 600 s per-test limit on a loaded machine
@pytest.mark.skipif(not FULL, reason="full τ² sweep: set GAPFORGE_TAU2_FULL=1")
@pytest.mark.parametrize("domain", ["retail", "airline", "telecom"])
@pytest.mark.parametrize("tail", ["answer", "loop"])
def test_every_task_matches_tau2(domain, tail):
    e, mismatches, rewards = env(domain), [], []
    for task_id in e.task_ids():
        script = gold_script(e, task_id, tail)  # type: ignore[arg-type]
        ours, theirs = run_adapter(e, task_id, script), run_orchestrator(e, task_id, script)
        rewards.append(ours[0])
        if ours != theirs:
            mismatches.append((task_id, ours, theirs))
    assert not mismatches, mismatches
    assert set(rewards) == ({1.0} if tail == "answer" else {0.0})
