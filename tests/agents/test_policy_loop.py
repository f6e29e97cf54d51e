"""run_episode + ChatModelPolicy against a small test environment (tests/agents/locker_env.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from locker_env import LockerEnv

from gapforge.agents.config import EndpointConfig
from gapforge.agents.errors import ModelEndpointError, ModelError
from gapforge.agents.llm import ScriptedChatModel, make_chat_model
from gapforge.agents.policy import ChatModelPolicy, EpisodeRecord, from_langchain, run_episode, to_langchain
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, PolicyModel, Score, ToolCall
from gapforge.sandbox.errors import SandboxLost
from gapforge.store.errors import DiskFull
from tests.fakes.fake_openai import FakeOpenAIServer, tool_call_message


def call(name: str, arguments: dict | str | None = None) -> dict:
    return {"tool_calls": [{"name": name, "arguments": {} if arguments is None else arguments}]}


def open_with_code_read(messages, tools) -> dict:
    """A rule: read the code from the last tool result (proves tool results reach the model)."""
    assert isinstance(messages[-1], ToolMessage)
    code = int(re.search(r"\d+", messages[-1].content).group())
    return call("open_locker", {"code": code})


def scripted_policy(answers, name: str = "scripted") -> ChatModelPolicy:
    return ChatModelPolicy(ScriptedChatModel.from_dict({"policy": answers}), name=name)


def test_chat_model_policy_is_a_policy_model() -> None:
    assert isinstance(scripted_policy([]), PolicyModel)


async def test_success_path() -> None:
    ep = await run_episode(scripted_policy([call("read_code"), open_with_code_read]), LockerEnv(), "hard")
    assert ep.termination == "done" and ep.error is None
    assert (ep.reward, ep.success, ep.turns) == (1.0, True, 2)
    assert ep.components == {"read": 1.0, "opened": 1.0}
    assert ep.score_info == {"wrong_attempts": 0}
    assert [m.role for m in ep.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert [tc.name for tc in ep.tool_calls] == ["read_code", "open_locker"]
    assert ep.tool_calls[1].arguments == {"code": 9876}
    assert ep.messages[3].tool_call_id == ep.tool_calls[0].id
    assert (ep.env, ep.task, ep.policy) == ("toy-locker", "hard", "scripted")
    assert set(ep.timings) == {"policy_s", "env_s", "total_s"}
    assert ep.timings["total_s"] >= ep.timings["policy_s"] + ep.timings["env_s"] - 1e-6
    assert EpisodeRecord.model_validate_json(ep.model_dump_json()) == ep  # storable as JSON


async def test_tool_errors_and_text_replies_are_observations() -> None:
    answers = ["Which locker?", call("smash"), call("open_locker", {"code": 1}), call("read_code"), open_with_code_read]
    ep = await run_episode(scripted_policy(answers), LockerEnv(), 7)  # integer seed task
    assert ep.termination == "done" and ep.success and ep.turns == 5
    assert ep.task == 7 and ep.tool_calls[-1].arguments == {"code": 1007}
    contents = [m.content for m in ep.messages if m.role in ("tool", "user")]
    assert "Please use the tools." in contents
    assert "Error: unknown tool 'smash'." in contents
    assert "Error: wrong code." in contents
    assert ep.score_info == {"wrong_attempts": 1}


async def test_max_turns_ends_the_episode_and_still_scores() -> None:
    policy = scripted_policy({"repeat": call("read_code")})
    ep = await run_episode(policy, LockerEnv(), "easy", max_turns=3)
    assert ep.termination == "max_turns" and ep.error is None
    assert ep.turns == 3 and len(ep.tool_calls) == 3
    assert (ep.reward, ep.success) == (0.5, False)  # scored by state: read, never opened


async def test_malformed_tool_call_ends_the_episode_with_the_raw_output() -> None:
    policy = scripted_policy([call("read_code"), call("open_locker", '{"code": 12')])
    ep = await run_episode(policy, LockerEnv(), "easy")
    assert ep.termination == "malformed_output"
    assert "invalid tool call 'open_locker'" in ep.error
    assert ep.turns == 1
    assert ep.messages[-1].role == "assistant" and ep.messages[-1].content == '{"code": 12'
    assert (ep.reward, ep.success) == (0.5, False)


async def test_env_raising_in_step_is_recorded_as_env_error() -> None:
    ep = await run_episode(scripted_policy([call("read_code"), call("explode")]), LockerEnv(), "easy")
    assert ep.termination == "env_error"
    # the env's own file:line, where the user looks first
    assert (
        ep.error
        == f"env.step failed: RuntimeError: the locker room caught fire (at {LOCKER_FILE}:{line_of('the locker room caught fire')})"
    )
    assert ep.turns == 2 and ep.reward == 0.5


async def test_failing_score_is_an_env_error_with_the_reason() -> None:
    ep = await run_episode(
        scripted_policy([call("read_code"), open_with_code_read]), LockerEnv(fail_score=True), "easy"
    )
    assert ep.termination == "env_error"  # the env's boundary, not a 0-reward verdict on the model
    assert (ep.reward, ep.success) == (0.0, False)
    assert ep.score_info == {
        "score_error": f"ValueError: score table missing (at {LOCKER_FILE}:{line_of('score table missing')})"
    }
    assert "env.score failed" in ep.error


class OverScoringLocker(LockerEnv):
    """Scores a reward above 1: the protocol's Score refuses it in the env's own `score`."""

    def score(self) -> Score:
        return Score(reward=2.0, success=True)


class ResetFails(LockerEnv):
    """`reset` raises; counts the `score` calls that follow."""

    scored = 0

    def reset(self, task):
        raise KeyError("patients table")

    def score(self) -> Score:
        type(self).scored += 1
        return super().score()


async def test_a_score_the_protocol_refuses_names_the_field_the_limit_and_the_line() -> None:
    ep = await run_episode(scripted_policy([call("read_code"), open_with_code_read]), OverScoringLocker(), "easy")
    assert ep.termination == "env_error"
    detail = ep.score_info["score_error"]
    # the validation's point, not pydantic's "1 validation error for Score" header
    assert detail.startswith("ValidationError: Score: reward: Input should be less than or equal to 1 (got 2.0)"), (
        detail
    )
    assert detail.endswith(f"(at {__file__}:{line_of('return Score(reward=2.0, success=True)', __file__)})")


async def test_a_reset_that_raises_is_not_scored() -> None:
    ep = await run_episode(scripted_policy([]), ResetFails(), "easy")
    assert ep.termination == "env_error" and ep.turns == 0
    assert ResetFails.scored == 0 and "env.score" not in ep.error and "score_error" not in ep.score_info
    assert ep.error.startswith("env.reset failed: KeyError: 'patients table' (at ")


class StepReturnsDict(LockerEnv):
    def step(self, action):
        return {"messages": [], "done": True}


class ResetReturnsText(LockerEnv):
    def reset(self, task):
        return "Open the locker."


class ScoreReturnsFloat(LockerEnv):
    def score(self):
        return 1.0


class UserEndpointDown(LockerEnv):
    """Its step asks an LLM user simulator whose endpoint is down past its retries."""

    def step(self, action):
        raise ModelEndpointError("user simulator endpoint http://127.0.0.1:9/v1 unreachable after 3 attempts")


async def test_an_env_call_that_returns_the_wrong_type_is_the_envs_error_saying_what_it_returned() -> None:
    step = await run_episode(scripted_policy([call("read_code")]), StepReturnsDict(), "easy")
    assert (step.termination, step.turns) == ("env_error", 1)
    assert step.error == "env.step failed: TypeError: env.step returned dict, not a StepResult (gapforge.envs.protocol)"
    reset = await run_episode(scripted_policy([]), ResetReturnsText(), "easy")
    assert reset.termination == "env_error" and "env.reset returned str, not a list of Message" in reset.error
    score = await run_episode(scripted_policy([call("read_code"), open_with_code_read]), ScoreReturnsFloat(), "easy")
    assert score.termination == "env_error" and "env.score returned float, not a Score" in score.error


async def test_an_endpoint_down_inside_an_env_call_is_the_endpoints_failure_not_the_envs() -> None:
    ep = await run_episode(scripted_policy([call("read_code")]), UserEndpointDown(), "easy")
    assert ep.termination == "endpoint_error" and ep.infrastructure_failure and not ep.final  # a resume plays it again
    assert ep.error.startswith("env.step failed on the endpoint (infrastructure): ") and "127.0.0.1:9" in ep.error


class ScoreLosesItsSandbox(LockerEnv):
    def score(self):
        raise SandboxLost("killed", "the container was killed from outside")


class ScoreFillsTheDisk(LockerEnv):
    def score(self):
        raise DiskFull("/tmp/ws", "the env's score file")


async def test_the_sandbox_lost_at_score_is_the_sandboxs_and_a_full_disk_stops_the_run() -> None:
    lost = await run_episode(scripted_policy([call("read_code"), open_with_code_read]), ScoreLosesItsSandbox(), "easy")
    assert lost.termination == "sandbox_error" and not lost.final and "env.score failed on the sandbox" in lost.error
    with pytest.raises(DiskFull):  # the machine's, not one episode's: the stage stops, resumable
        await run_episode(scripted_policy([call("read_code"), open_with_code_read]), ScoreFillsTheDisk(), "easy")


async def test_unknown_task_propagates_as_env_error() -> None:
    with pytest.raises(EnvError, match="unknown locker task 'nope'"):
        await run_episode(scripted_policy([]), LockerEnv(), "nope")


async def test_scripted_policy_out_of_answers_is_a_user_error() -> None:
    with pytest.raises(ModelError, match="ran out of answers for prompt 'policy'"):
        await run_episode(scripted_policy([call("read_code")]), LockerEnv(), "easy")


LOCKER_FILE = sys.modules[LockerEnv.__module__].__file__


def line_of(text: str, path: str | None = None) -> int:
    """The 1-based line of `path` (default: locker_env.py) that holds `text`."""
    lines = Path(path or LOCKER_FILE).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_message_conversion_round_trip() -> None:
    msgs = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant("thinking", [ToolCall(id="c1", name="open_locker", arguments={"code": 3})]),
        Message.tool("c1", "The locker is open.", name="open_locker"),
    ]
    lc = to_langchain(msgs)
    assert [m.type for m in lc] == ["system", "human", "ai", "tool"]
    assert lc[3].tool_call_id == "c1"
    back = from_langchain(lc[2])
    assert back == msgs[2]


# --- the real ChatOpenAI client against a local OpenAI-compatible server ---------------------


def locker_responder(req: dict) -> dict:
    """Reads the code from the last tool result, like a model would."""
    last = req["messages"][-1]
    if last["role"] == "tool":
        return tool_call_message("open_locker", {"code": int(re.search(r"\d+", last["content"]).group())}, call_id="c2")
    return tool_call_message("read_code", {}, call_id="c1")


def endpoint_policy(srv: FakeOpenAIServer, max_retries: int = 2) -> ChatModelPolicy:
    endpoint = EndpointConfig(base_url=srv.base_url, model="fake", max_retries=max_retries, timeout_s=10)
    return ChatModelPolicy(make_chat_model(endpoint, retry_backoff_s=0.0), name="endpoint:fake")


async def test_endpoint_policy_success_with_temperature_override_and_retries() -> None:
    with FakeOpenAIServer(locker_responder, fail_first=1, fail_status=503) as srv:
        ep = await run_episode(endpoint_policy(srv), LockerEnv(), "easy", temperature=0.7)
        assert ep.termination == "done" and ep.success and ep.turns == 2
        assert srv.request_count == 3  # one injected failure + two turns
        body = srv.requests[-1]
        assert body["temperature"] == 0.7
        assert [t["function"]["name"] for t in body["tools"]] == ["read_code", "open_locker", "explode"]
        tool_msg = body["messages"][-1]
        assert tool_msg == {"role": "tool", "content": "The note says: 1234", "tool_call_id": "c1"}
        assert json.loads(body["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {}


async def test_endpoint_down_after_retries_ends_the_episode_not_the_run() -> None:
    with FakeOpenAIServer(locker_responder, fail_first=10**6, fail_status=500) as srv:
        ep = await run_episode(endpoint_policy(srv, max_retries=2), LockerEnv(), "easy")
        assert ep.termination == "endpoint_error"
        assert "failed 3 attempt(s)" in ep.error
        assert srv.request_count == 3
        assert ep.turns == 0 and (ep.reward, ep.success) == (0.0, False)
        assert [m.role for m in ep.messages] == ["system", "user"]


async def test_endpoint_invalid_tool_call_json_is_malformed_output() -> None:
    def broken(_req: dict) -> dict:
        bad = tool_call_message("open_locker", {})
        bad["tool_calls"][0]["function"]["arguments"] = '{"code": 12'
        return bad

    with FakeOpenAIServer(broken) as srv:
        ep = await run_episode(endpoint_policy(srv), LockerEnv(), "easy")
        assert ep.termination == "malformed_output"
        assert ep.messages[-1].content == '{"code": 12'
        assert srv.request_count == 1
