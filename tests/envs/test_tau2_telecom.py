"""tau2:telecom: users act on their device through their own tools; tau2's ENV assertions decide the reward."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tau2")

from gapforge.envs.protocol import Message, TargetEnvironment, ToolCall
from gapforge.envs.registry import make_env
from gapforge.envs.tau2 import Tau2Env, UserEndpoint
from tests.envs.conformance import check_conformance
from tests.envs.tau2_reference import gold_script, run_adapter
from tests.fakes.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.tau2

TASKS = [  # one per issue family; the service task's gold ends with a transfer to a human
    "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]",
    "[mms_issue]break_app_sms_permission|data_mode_off[PERSONA:None]",
    "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]",
]


@pytest.fixture(scope="module")
def telecom() -> Tau2Env:
    return Tau2Env("telecom")


def test_registry_builds_telecom_and_families_are_issue_types(telecom):
    env = make_env("tau2:telecom")
    assert isinstance(env, TargetEnvironment) and env.name == "tau2:telecom" and len(env.task_ids()) == 114
    assert {telecom.task_family(t) for t in telecom.task_ids()} == {"mobile_data_issue", "mms_issue", "service_issue"}
    user_side = [
        a
        for t in telecom.task_ids()
        for a in telecom.task(t).evaluation_criteria.actions or []
        if a.requestor == "user"
    ]
    assert len(user_side) == 393  # most of the gold actions are the user's, on the device


def test_conformance_on_telecom():
    check_conformance(lambda: make_env("tau2:telecom"), TASKS[:2])


@pytest.mark.parametrize("task_id", TASKS)
def test_gold_replay_with_the_scripted_user_scores_one(telecom, task_id):
    reward, termination = run_adapter(telecom, task_id, gold_script(telecom, task_id))
    assert (reward, termination) == (1.0, "user_stop")
    score = telecom.score()
    assert score.info["reward_basis"][0] == "ENV_ASSERTION" and score.components["env_assertion"] == 1.0
    user_calls = [m for m in telecom.trajectory() if m["role"] == "user" and m.get("tool_calls")]
    assert len(user_calls) == sum(a.requestor == "user" for a in telecom.task(task_id).evaluation_criteria.actions)


@pytest.mark.parametrize("task_id", TASKS)
def test_doing_nothing_scores_zero(telecom, task_id):
    def idle():
        while True:
            yield Message.assistant("How can I help you today?")

    reward, termination = run_adapter(telecom, task_id, idle)
    assert (reward, termination) == (0.0, "user_stop")
    components = telecom.score().components  # the device is still broken, or (service task) no transfer happened
    assert components.get("env_assertion") == 0.0 or components.get("action") == 0.0


def test_the_policy_sees_only_the_users_words_not_its_device_calls(telecom):
    task_id = TASKS[0]
    telecom.reset(task_id)
    result = telecom.step(Message.assistant("Please do this on your phone now: toggle_airplane_mode."))
    assert [m.role for m in result.messages] == ["user"] and result.messages[0].content.startswith("I did that.")
    roles = [(m["role"], bool(m.get("tool_calls"))) for m in telecom.trajectory()[-4:]]
    assert roles == [("assistant", False), ("user", True), ("tool", False), ("user", False)]  # tau2's order


def test_llm_user_gets_the_device_tools_and_its_calls_run_on_the_device():
    replies = [
        {"role": "assistant", "content": "My mobile data is not working."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "u1", "type": "function", "function": {"name": "toggle_airplane_mode", "arguments": "{}"}}
            ],
        },
        {"role": "assistant", "content": "Airplane mode is off now. ###STOP###"},
    ]
    pending = list(replies)
    with FakeOpenAIServer(lambda _req: pending.pop(0)) as server:
        endpoint = UserEndpoint(model="fake-user", base_url=server.base_url, max_retries=0, timeout_s=10)
        env = Tau2Env("telecom", user="llm", user_model=endpoint)
        _, greeting, first = env.reset(TASKS[0])
        assert (greeting.role, first.content) == ("assistant", "My mobile data is not working.")
        result = env.step(Message.assistant("Please turn off airplane mode."))
        assert result.done and result.messages[0].content.endswith("###STOP###")
    tools = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert {"toggle_airplane_mode", "run_speed_test", "check_status_bar"} <= tools
    tool_result = server.requests[2]["messages"][-1]
    assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == "u1"
    assert "airplane" in json.dumps(tool_result).lower()
    score = env.score()  # the device call counted: airplane mode is off, roaming still off -> assertions fail
    assert score.reward == 0.0 and score.info["termination_reason"] == "user_stop" and score.info["steps"] == 5


def test_user_tool_errors_count_towards_tau2s_error_limit():
    env = Tau2Env("telecom", max_errors=1)
    env.reset(TASKS[0])
    bad = ToolCall(id="x", name="no_such_tool", arguments={})
    result = env.step(Message.assistant(tool_calls=[bad]))
    assert result.done and result.info["termination"] == "too_many_errors" and env.score().reward == 0.0
