"""Every episode has a time limit: a user env's call or a policy call that never returns ends that episode as
`timeout`, blamed on what was waited on; the other episodes go on; a user env that raises costs its episodes
only, up to the failure share; a resume plays only what is missing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gapforge.agents.episode import run_episode
from gapforge.agents.policy import ChatModelPolicy
from gapforge.agents.rollouts import CollectPlan, EnvFailureShare, collect, play_episode
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.envs.env_threads import DaemonThreads, runs_inline
from gapforge.envs.errors import EndpointError
from gapforge.envs.protocol import Message, Score, StepResult
from gapforge.envs.registry import make_env
from gapforge.sandbox.errors import SandboxLost
from gapforge.store import Store
from gapforge.store.errors import DiskFull

SPEC = f"{Path(__file__).resolve().parents[1] / 'data' / 'faulty_env.py'}:FaultyEnv"
LIMIT = 1.5  # a healthy episode here takes milliseconds: the margin is for a loaded CI host


def _policy() -> ChatModelPolicy:
    return ChatModelPolicy(ScriptedChatModel.from_dict({"policy": {"repeat": "Done, handled."}}), name="closer")


class _SilentPolicy:
    """A policy whose answer never comes (an endpoint that accepted the request and went quiet)."""

    name = "silent"

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'r.db'}")
    yield s
    s.close()


def test_a_step_that_never_returns_ends_the_episode_as_a_timeout_on_the_env() -> None:
    env = make_env(SPEC)
    assert env.inline is True and not runs_inline(env)  # a user's class never holds the event loop
    t0 = time.monotonic()
    ep = asyncio.run(run_episode(_policy(), env, "hang-step", max_turns=3, timeout_s=LIMIT))
    assert time.monotonic() - t0 < LIMIT + 2.0
    assert ep.termination == "timeout" and ep.turns == 1 and ep.reward == 0.0
    assert ep.score_info == {
        "timeout": {"boundary": "env", "call": "env.step", "limit_s": LIMIT}
    }  # not scored: the env is stuck
    assert f"env.step did not return within the episode's time limit of {LIMIT:g} s, waiting on the env's own code" in (
        ep.error or ""
    )
    assert SPEC in (ep.error or "")  # the env is named
    assert ep.env_failure and not ep.final and not ep.infrastructure_failure


def test_a_policy_that_never_answers_is_a_timeout_on_the_policy_an_infrastructure_failure() -> None:
    ep = asyncio.run(run_episode(_SilentPolicy(), make_env(SPEC), "ok-1", max_turns=3, timeout_s=LIMIT))
    assert ep.termination == "timeout" and ep.timeout_boundary == "policy" and ep.turns == 0
    assert "policy.respond" in (ep.error or "") and "the policy's endpoint or model" in (ep.error or "")
    assert ep.infrastructure_failure and not ep.env_failure


def test_without_a_limit_and_on_a_healthy_env_nothing_changes() -> None:
    ep = asyncio.run(run_episode(_policy(), make_env(SPEC), "ok-1", max_turns=3, timeout_s=LIMIT))
    assert (ep.termination, ep.reward, ep.success, ep.turns) == ("done", 1.0, True, 1) and ep.final


def test_only_builtin_envs_run_inline() -> None:
    assert runs_inline(make_env("shop"))  # the built-in shop env (scripted user) keeps its fast path
    assert not runs_inline(make_env(SPEC))


def test_daemon_threads_abandon_a_stuck_call_and_keep_serving() -> None:
    gate = threading.Event()
    threads = DaemonThreads("t", idle_s=5.0)
    stuck = threads.submit(gate.wait)
    assert threads.submit(lambda: 41 + 1).result(timeout=5) == 42  # a new thread serves while one is stuck
    assert threads.submit(lambda: "again").result(timeout=5) == "again"  # the idle one is reused
    assert not stuck.done()
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("t-"))  # never joined at exit
    threads.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        threads.submit(print)
    gate.set()
    assert stuck.result(timeout=5) is True


def _plan(store: Store, tasks: list[str], share: float = 1.0, run_id: str | None = None) -> CollectPlan:
    return CollectPlan(
        run_id=run_id or store.create_run("rollouts", {}),
        env=SPEC,
        tasks=tasks,
        samples=1,
        concurrency=8,
        max_turns=3,
        episode_timeout_s=LIMIT,
        max_env_failure_share=share,
    )


def test_collect_stores_env_errors_skips_the_timeout_and_a_resume_plays_only_it(store: Store) -> None:
    tasks = ["ok-1", "ok-2", "hang-step", "raise-reset", "raise-step", "raise-score"]
    plan = _plan(store, tasks)
    result = asyncio.run(collect(plan, make_env=lambda: make_env(SPEC), policy=_policy(), sink=store))
    assert (result.planned, result.ran, result.env_errors, len(result.timeouts), result.infra_failures) == (
        6,
        5,
        3,
        1,
        [],
    )
    assert result.timeouts[0].task_id == "hang-step" and "env.step did not return" in result.timeouts[0].error
    assert not result.complete and result.env_failures == 4
    rows = {r.task_id: r for r in store.episodes(plan.run_id)}
    assert set(rows) == set(tasks) - {"hang-step"}  # a timeout is never stored
    assert rows["raise-reset"].termination == "env_error" and "env.reset failed: KeyError" in rows["raise-reset"].error
    assert rows["raise-step"].termination == "env_error" and "env.step failed: RuntimeError" in rows["raise-step"].error
    assert (
        rows["raise-score"].termination == "env_error" and "env.score failed: ValueError" in rows["raise-score"].error
    )
    assert rows["ok-1"].success and rows["ok-2"].success

    played: list[str] = []
    again = asyncio.run(
        collect(
            plan,
            make_env=lambda: make_env(SPEC),
            policy=_policy(),
            sink=store,
            on_episode=lambda ep: played.append(str(ep.task)),
        )
    )
    assert played == ["hang-step"]  # the resume plays only the episode that timed out
    assert (again.skipped, again.ran, len(again.timeouts)) == (5, 0, 1)


def test_past_the_failure_share_the_collection_stops_naming_the_env(store: Store) -> None:
    plan = _plan(store, ["raise-reset", "raise-step", "raise-score", "ok-1"], share=0.5)
    with pytest.raises(EnvFailureShare) as err:
        asyncio.run(collect(plan, make_env=lambda: make_env(SPEC), policy=_policy(), sink=store))
    text = str(err.value)
    assert "\n" not in text and f"env '{SPEC}' failed 3 of the 4 planned episodes" in text
    assert "rollouts.max_env_failure_share=0.5" in text and "fix the env's code" in text
    assert {r.termination for r in store.episodes(plan.run_id) if r.task_id.startswith("raise")} == {"env_error"}


def test_an_env_whose_constructor_raises_costs_only_its_episode(store: Store) -> None:
    built = iter(range(100))

    def flaky() -> Any:
        if next(built) == 0:
            raise OSError("the ticket database is locked")
        return make_env(SPEC)

    plan = CollectPlan(
        run_id=store.create_run("rollouts", {}),
        env=SPEC,
        tasks=["ok-1", "ok-2"],
        samples=1,
        concurrency=1,
        max_turns=3,
        episode_timeout_s=LIMIT,
    )
    result = asyncio.run(collect(plan, make_env=flaky, policy=_policy(), sink=store))
    rows = sorted(store.episodes(plan.run_id), key=lambda r: r.task_id)
    assert result.ran == 2 and [r.termination for r in rows] == ["env_error", "done"]
    assert rows[0].error == "building the env failed: OSError: the ticket database is locked"


class _StuckEnv:
    """A user's env whose step and close both block until `release` (a hung server: its close waits on it too)."""

    name = "stuck"

    def __init__(self) -> None:
        self.release, self.closing, self.closed = threading.Event(), threading.Event(), threading.Event()

    def tools(self) -> list[dict[str, Any]]:
        return []

    def reset(self, task: str) -> list[Message]:
        return [Message.system("Answer the user."), Message.user("Please help.")]

    def step(self, message: Message) -> StepResult:
        self.release.wait()
        return StepResult(messages=[], done=True)

    def score(self) -> Score:
        return Score(reward=1.0, success=True)

    def close(self) -> None:
        self.closing.set()
        self.release.wait()
        self.closed.set()


def test_a_timed_out_episode_does_not_wait_for_its_stuck_env_to_close(caplog: pytest.LogCaptureFixture) -> None:
    env = _StuckEnv()
    with caplog.at_level(logging.WARNING, logger="gapforge.agents.rollouts"):
        ep = asyncio.run(
            play_episode(
                _policy(),
                lambda: env,
                "t",
                0,
                max_turns=3,
                temperature=None,
                executor=DaemonThreads("t"),
                timeout_s=LIMIT,
                env_name="stuck",
            )
        )
    assert ep.termination == "timeout" and ep.timeout_boundary == "env" and ep.env_failure
    assert not env.closed.is_set()  # the episode came back while its env's close is still stuck
    assert "did not close within" not in caplog.text  # its close was never waited for (not a second time limit)
    assert env.closing.wait(5)  # but it was started, in the background
    env.release.set()
    assert env.closed.wait(5)


class _LateEnv(_StuckEnv):
    """A user's env whose constructor returns only after `built` is set (past the episode's time limit)."""

    built = threading.Event()
    closes = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).built.wait()

    def close(self) -> None:
        type(self).closes += 1
        self.closed.set()


def test_an_env_built_after_the_deadline_is_closed_when_it_arrives() -> None:
    made: list[_LateEnv] = []

    def build() -> _LateEnv:
        made.append(_LateEnv())
        return made[-1]

    ep = asyncio.run(
        play_episode(
            _policy(),
            build,
            "t",
            0,
            max_turns=3,
            temperature=None,
            executor=DaemonThreads("t"),
            timeout_s=LIMIT,
            env_name="late",
        )
    )
    assert (
        ep.termination == "timeout" and ep.score_info["timeout"]["call"] == "make_env" and ep.timeout_boundary == "env"
    )
    assert _LateEnv.closes == 0
    _LateEnv.built.set()
    assert _wait_for(lambda: bool(made)) and made[0].closed.wait(5)
    assert _LateEnv.closes == 1  # its server process (or whatever it holds) is not leaked


def _wait_for(cond: Any, limit_s: float = 5.0) -> bool:
    end = time.monotonic() + limit_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return bool(cond())


@pytest.mark.parametrize(
    ("error", "termination"),
    [
        (SandboxLost("removed", "the container was removed from outside"), "sandbox_error"),
        (EndpointError("the user simulator's endpoint kept failing: 503"), "endpoint_error"),
        (DiskFull("/data", "the env's database"), "sandbox_error"),
    ],
)
def test_an_infrastructure_failure_building_the_env_is_not_stored_and_a_resume_plays_it(
    store: Store, error: Exception, termination: str
) -> None:
    def broken() -> Any:
        raise error

    plan = CollectPlan(
        run_id=store.create_run("rollouts", {}),
        env=SPEC,
        tasks=["ok-1"],
        samples=1,
        concurrency=1,
        max_turns=3,
        episode_timeout_s=LIMIT,
    )
    result = asyncio.run(collect(plan, make_env=broken, policy=_policy(), sink=store))
    assert (result.ran, result.env_errors, store.episodes(plan.run_id)) == (0, 0, [])
    assert [f.termination for f in result.infra_failures] == [termination] and not result.complete
    assert type(error).__name__ in result.infra_failures[0].error and "infrastructure" in result.infra_failures[0].error
    again = asyncio.run(collect(plan, make_env=lambda: make_env(SPEC), policy=_policy(), sink=store))
    assert again.ran == 1 and again.complete
