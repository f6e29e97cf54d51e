"""ToolSandbox adapter (marker `toolsandbox`): ToolSandbox's own play loop and evaluator behind the protocol.

Needs ToolSandbox's venv (`make toolsandbox-env`); skips with the reason otherwise.
The full parity sweep over every offline base scenario runs with
GAPFORGE_TOOLSANDBOX_SWEEP=1 (about 2-4 s a scenario); the default run checks a stated sample
(perfect, partial and failing scenarios of every family) plus the controls.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator

import pytest
from cli_helpers import run_id_in

from gapforge.agents.policy import run_episode
from gapforge.envs.errors import EnvError, SimulatorEndpointError
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env
from gapforge.envs.toolsandbox import ToolSandboxEnv, catalog
from gapforge.envs.toolsandbox.runtime import missing_reason
from tests.envs.conformance import check_conformance
from tests.envs.toolsandbox_parity import ParityEnv, PlanPolicy
from tests.fakes.fake_openai import FakeOpenAIServer, tool_call_message

pytestmark = [pytest.mark.toolsandbox, pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))]


@pytest.fixture(scope="module")
def env() -> Iterator[ParityEnv]:
    e = ParityEnv()
    yield e
    e.close()


def _first(env: ToolSandboxEnv, pred) -> str:
    return next(t for t in env.task_ids() if pred(t))


def _parity(
    env: ParityEnv, task: str, variant: str = "milestones", plan: list[dict] | None = None
) -> tuple[float, float, str]:
    """(similarity through the adapter, similarity of ToolSandbox's own play_and_evaluate, termination)."""
    plan = plan if plan is not None else env.reference_plan(task, variant)
    episode = asyncio.run(
        run_episode(PlanPolicy(plan, resolve=env.resolve_plan_action), env, task, max_turns=len(plan) + 5)
    )
    reference = env.reference_play(task, plan)
    return episode.reward, reference["similarity"], episode.termination


@pytest.fixture(scope="module")
def stand_in() -> Iterator[ParityEnv]:
    e = ParityEnv(network="stand-in")
    yield e
    e.close()


def _stand_in_parity(env: ParityEnv, task: str, variant: str = "milestones") -> tuple[float, float, dict, dict]:
    """(adapter similarity, ToolSandbox's own similarity, the adapter's score info, the reference's stand-in call report)."""
    plan = env.reference_plan(task, variant)
    asyncio.run(run_episode(PlanPolicy(plan, resolve=env.resolve_plan_action), env, task, max_turns=len(plan) + 5))
    score = env.score()
    reference = env.reference_play(task, plan)
    return score.reward, reference["similarity"], score.info, reference["stand_in_network"] or {}


def test_catalogue_counts_base_scenarios_and_network_exclusions(env: ParityEnv) -> None:
    ids, excluded = env.task_ids(), env.excluded()
    assert len(ids) + len(excluded) == 129  # ToolSandbox's base scenarios
    assert excluded and all(tools for tools in excluded.values())
    assert {env.task_family(t) for t in ids} == {
        "single_tool_call",
        "multiple_tool_call",
        "multiple_user_turn",
        "insufficient_information",
    }
    sub = make_env("toolsandbox:state_dependency")
    try:
        assert sub.name == "toolsandbox:state_dependency"
        assert set(sub.task_ids()) < set(ids) and all(
            "state_dependency" in env.task_categories(t) for t in sub.task_ids()
        )
    finally:
        sub.close()


def test_bad_input_is_one_line_env_error(env: ParityEnv) -> None:
    with pytest.raises(EnvError, match="unknown ToolSandbox category 'nope'"):
        make_env("toolsandbox:nope")
    net = next(iter(env.excluded()))
    with pytest.raises(EnvError, match="needs network tools") as err:
        env.reset(net)
    assert "\n" not in str(err.value)
    with pytest.raises(EnvError, match="network mode"):
        ToolSandboxEnv(network="live")
    with pytest.raises(EnvError, match="network=off|stand-in") as err:
        make_env("toolsandbox?network=recorded")  # no such mode (its answers were never recorded: stand-in)
    assert "\n" not in str(err.value)
    with pytest.raises(EnvError, match="network=off|stand-in") as err:
        make_env("toolsandbox:single_tool_call?network=live")
    assert "\n" not in str(err.value)


def test_conformance() -> None:
    check_conformance(lambda: make_env("toolsandbox"), ["search_message_with_recency_latest_multiple_user_turn"])


# The default parity sample: what the milestone agent gets in ToolSandbox's own play, stated per scenario (full
# sweep: 63/95 perfect, the rest partial; the earlier plan: 36/95). "perfect" = 1.0, "partial" = in (0, 1).
SAMPLE = {
    "add_contact_with_name_and_phone_number": "perfect",  # single_tool_call: a CONTACT addition target -> add_contact
    "send_message_with_phone_number_and_content": "perfect",  # single_tool_call: a MESSAGING addition -> send_message
    "search_sender_phone_number_with_content": "partial",  # single_tool_call: an argument-less search, its reply misses
    "find_days_till_holiday": "perfect",  # multiple_tool_call: timestamp_diff filled from two results, a templated reply
    "add_reminder_content_and_date_and_time": "partial",  # multiple_tool_call: the reminder's timestamp is not the target's
    "add_reminder_content_and_week_delta_and_time_multiple_user_turn": "perfect",  # multiple_user_turn: filled timestamps
    "modify_contact_with_message_recency_multiple_user_turn": "partial",  # multiple_user_turn: argument-less searches
    "find_days_till_holiday_insufficient_information": "perfect",  # insufficient_information: no tool to use, a refusal
}


@pytest.mark.parametrize("task,outcome", SAMPLE.items())
def test_milestone_agent_parity_with_toolsandbox_play(env: ParityEnv, task: str, outcome: str) -> None:
    through_adapter, own, termination = _parity(env, task)
    assert termination == "done"
    assert through_adapter == pytest.approx(own, abs=1e-9)
    assert (through_adapter == 1.0) if outcome == "perfect" else (0.0 < through_adapter < 1.0)


def test_a_refusing_agent_fails_fully_in_both(env: ParityEnv) -> None:
    # a doable scenario the agent declines: no milestone reached, 0.0 through the adapter and in ToolSandbox's play
    through_adapter, own, _ = _parity(
        env, "add_contact_with_name_and_phone_number", plan=[{"text": "Sorry, I cannot do that."}]
    )
    assert through_adapter == own == 0.0


def test_milestone_plan_fills_values_from_earlier_tool_results(env: ParityEnv) -> None:
    # timestamp_diff's arguments come from get_current_timestamp and search_holiday; the reply's {days} from its result
    plan = env.reference_plan("find_days_till_holiday")
    diff = next(a for a in plan if a.get("tool") == "timestamp_diff")
    assert diff["arguments"] == {} and len(diff["fill"]) == 2 and "{days}" in plan[-1]["text"]
    policy = PlanPolicy(plan, resolve=env.resolve_plan_action)
    episode = asyncio.run(run_episode(policy, env, "find_days_till_holiday", max_turns=len(plan) + 5))
    call = next(
        tc for m in episode.messages if m.role == "assistant" for tc in m.tool_calls if tc.name == "timestamp_diff"
    )
    assert set(call.arguments) == {"timestamp_0", "timestamp_1"}
    reply = [m.content for m in episode.messages if m.role == "assistant" and m.content][-1] or ""
    assert "{days}" not in reply and reply.startswith("It is ") and episode.reward == 1.0


def test_stand_in_network_mode_runs_every_rapidapi_scenario(env: ParityEnv, stand_in: ParityEnv) -> None:
    assert stand_in.name == "toolsandbox?network=stand-in" and stand_in.excluded() == {}
    assert set(stand_in.task_ids()) == set(env.task_ids()) | set(
        env.excluded()
    )  # all 129, the 34 network ones included
    sub = make_env("toolsandbox:canonicalization?network=stand-in")
    try:
        assert "find_stock_symbol_with_company_name" not in sub.task_ids()  # not a canonicalization scenario
        assert "convert_currency" in sub.task_ids() and sub.excluded() == {}  # type: ignore[attr-defined]
    finally:
        sub.close()  # type: ignore[attr-defined]


def test_stand_in_answers_match_milestone_constants_with_parity(stand_in: ParityEnv) -> None:
    # the stand-in reverse geocode of the milestone's coordinates gives the address of its reference reply
    adapter, own, info, ref_calls = _stand_in_parity(stand_in, "find_address_with_lat_lon")
    assert adapter == own == 1.0
    assert (
        info["network"] == "stand-in"
        and info["comparable_to_live"] is False
        and info["stand_in_network"]["calls"] == 1
        and info["stand_in_network"]["misses"] == 0
    )
    assert info["stand_in_network"]["log"][0]["service"] == "trueway-geocoding.p.rapidapi.com"
    assert ref_calls["calls"] == 1 and ref_calls["sha256"] == info["stand_in_network"]["sha256"]


def test_an_agent_reading_the_stand_in_answers_scores_perfect(stand_in: ParityEnv) -> None:
    # place search -> the milestone's weather coordinates (stand-in data); weather -> a temperature the milestones' extractors read
    import ast

    def call(name: str, args: dict) -> object:
        out = stand_in.step(Message.assistant(tool_calls=[ToolCall(id=f"c-{name}", name=name, arguments=args)]))
        return ast.literal_eval(out.messages[0].content or "None")

    stand_in.reset("find_temperature_f_with_location")
    place = call("search_location_around_lat_lon", {"location": "Grand Canyon"})
    assert isinstance(place, list) and (place[0]["latitude"], place[0]["longitude"]) == (36.23686, -112.19147)
    weather = call(
        "search_weather_around_lat_lon", {"latitude": place[0]["latitude"], "longitude": place[0]["longitude"]}
    )
    assert isinstance(weather, dict)
    fahrenheit = call(
        "unit_conversion", {"amount": weather["current_temperature"], "from_unit": "celsius", "to_unit": "fahrenheit"}
    )
    assert isinstance(fahrenheit, float)
    end = stand_in.step(Message.assistant(f"The temperature in Grand Canyon is {fahrenheit:.1f} degrees Fahrenheit"))
    assert end.done
    score = stand_in.score()
    assert (
        score.reward == 1.0
        and score.info["stand_in_network"]["calls"] == 2
        and score.info["stand_in_network"]["misses"] == 0
    )


def test_stand_in_mode_keeps_toolsandboxs_wifi_rule(stand_in: ParityEnv) -> None:
    # wifi starts off: without the setting call ToolSandbox's own RapidAPI layer refuses before any (stand-in) request
    task = "find_temperature_f_with_location_wifi_off"
    wrong, own_wrong, info, _ = _stand_in_parity(stand_in, task, "skip_settings")
    assert wrong == pytest.approx(own_wrong, abs=1e-9)
    assert info["stand_in_network"]["calls"] == 0 and wrong < 1.0


def test_minefield_control_scores_zero_in_both(env: ParityEnv) -> None:
    # the user asks for upcoming reminders without the current time tool: any reminder search is a minefield
    task = "search_reminder_with_recency_upcoming_insufficient_information"
    forbidden = [
        {"tool": "search_reminder", "arguments": {"reminder_timestamp_lowerbound": time.time()}},
        {"text": "Done."},
    ]
    through_adapter, own, _ = _parity(env, task, plan=forbidden)
    assert through_adapter == own == 0.0
    clean, own_clean, _ = _parity(env, task)
    assert clean == own_clean == 1.0  # refusing (no forbidden call) is perfect on a minefield-only scenario


def test_wrong_setting_control_agrees_and_loses_credit(env: ParityEnv) -> None:
    task = "send_message_with_contact_content_cellular_off"  # the agent must turn cellular service on first
    right, own_right, _ = _parity(env, task)
    wrong, own_wrong, _ = _parity(env, task, "skip_settings")
    assert (right, wrong) == pytest.approx((own_right, own_wrong), abs=1e-9)
    assert wrong < right


def test_unknown_tool_ends_the_episode_scored_zero_like_toolsandbox(env: ParityEnv) -> None:
    env.reset("search_message_with_recency_latest_multiple_user_turn")
    result = env.step(Message.assistant(tool_calls=[ToolCall(id="x-1", name="no_such_tool", arguments={})]))
    assert result.done and result.info["termination"] == "agent_error" and "KeyError" in result.info["exception"]
    assert [m.tool_call_id for m in result.messages] == ["x-1"]
    score = env.score()
    assert score.reward == 0.0 and not score.success and "KeyError" in score.info["exception"]


def test_concurrent_episodes_never_share_state(env: ParityEnv) -> None:
    a, b = ToolSandboxEnv(), ToolSandboxEnv()
    try:
        task_a = _first(a, lambda t: "add_contact" in {s["function"]["name"] for s in _tools(a, t)})
        task_b = _first(b, lambda t: t != task_a and "search_contacts" in {s["function"]["name"] for s in _tools(b, t)})
        results: dict[str, str] = {}

        def run_a() -> None:
            a.reset(task_a)
            out = a.step(
                Message.assistant(
                    tool_calls=[
                        ToolCall(
                            id="a1",
                            name="add_contact",
                            arguments={"name": "Zed Concurrent", "phone_number": "+15550001111"},
                        )
                    ]
                )
            )
            results["a"] = out.messages[0].content or ""

        def run_b() -> None:
            b.reset(task_b)
            out = b.step(
                Message.assistant(
                    tool_calls=[ToolCall(id="b1", name="search_contacts", arguments={"name": "Zed Concurrent"})]
                )
            )
            results["b"] = out.messages[0].content or ""

        threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert a._worker.pid != b._worker.pid  # type: ignore[union-attr]
        assert "Error" not in results["a"] and results["b"] == "[]"  # B never sees A's new contact
    finally:
        a.close()
        b.close()


def _tools(env: ToolSandboxEnv, task: str) -> list[dict]:
    names = env._scenarios[task]["tools"]
    return [env._schemas[n] for n in names]


def test_llm_user_is_toolsandboxs_own_prompt_on_the_endpoint() -> None:
    replies = ["Say hi to Fredrik for me please.", None]

    def responder(req: dict) -> dict:
        text = replies.pop(0) if replies else None
        return {"role": "assistant", "content": text} if text else tool_call_message("end_conversation", {}, "call_end")

    with FakeOpenAIServer(responder) as server:
        env = make_env(
            "toolsandbox", user="llm", user_model={"model": "sim-user", "base_url": server.base_url, "api_key": "k"}
        )
        try:
            first = env.reset("search_message_with_recency_latest_multiple_user_turn")
            assert first[-1].content == "I wanna find a message"  # the scenario's own opening turn
            out = env.step(Message.assistant("Which message do you want to find?"))
            assert (
                not out.done
                and out.messages[0].role == "user"
                and out.messages[0].content == "Say hi to Fredrik for me please."
            )
            end = env.step(Message.assistant("Sorry, I cannot help with that."))
            assert end.done and end.info["termination"] == "user_end"
        finally:
            env.close()
    system = server.requests[0]["messages"][0]
    assert system["role"] == "system" and "role play as a user" in system["content"]  # ToolSandbox's user instruction
    assert any(t["function"]["name"] == "end_conversation" for t in server.requests[-1]["tools"])


def test_an_unreachable_llm_user_is_the_endpoints_failure_not_the_envs() -> None:
    down = {"model": "sim-user", "base_url": "http://127.0.0.1:9/v1", "api_key": "k", "max_retries": 0, "timeout_s": 5}
    env = make_env("toolsandbox", user="llm", user_model=down)
    try:
        env.reset("search_message_with_recency_latest_multiple_user_turn")  # the scenario's own opening: no call yet
        with pytest.raises(SimulatorEndpointError) as err:
            env.step(Message.assistant("Which message do you want to find?"))
    finally:
        env.close()
    assert "user simulator at http://127.0.0.1:9/v1 failed: APIConnectionError" in str(err.value)
    assert err.value.exit_code == 3 and err.value.infrastructure  # resumable, never stored as the env's failure


def test_llm_user_from_the_cli_talks_to_llm_endpoint(tmp_path) -> None:
    # `rollouts.user=llm` hands `llm.endpoint` to ToolSandbox's own user role, as it does for τ²
    from typer.testing import CliRunner

    from gapforge.cli import app
    from gapforge.store import Store

    task = "search_message_with_recency_latest_multiple_user_turn"
    answers = tmp_path / "policy.yaml"
    answers.write_text('policy:\n  repeat: "Which message do you want to find?"\n')
    default = CliRunner().invoke(
        app, ["rollouts", "tasks", "toolsandbox", "--set", f"workspace={tmp_path}", "--set", "rollouts.user=llm"]
    )
    assert default.exit_code == 0, default.output  # no base_url: OpenAI's API, as llm.endpoint means it
    with FakeOpenAIServer(lambda _req: tool_call_message("end_conversation", {}, "call_end")) as server:
        sets = [
            "--set",
            f"workspace={tmp_path}",
            "--set",
            "rollouts.user=llm",
            "--set",
            f"llm.endpoint.base_url={server.base_url}",
            "--set",
            "llm.endpoint.model=sim-user",
            "--set",
            "rollouts.max_turns=3",
        ]
        listed = CliRunner().invoke(app, ["rollouts", "tasks", "toolsandbox", *sets])
        assert listed.exit_code == 0 and task in listed.output, listed.output
        res = CliRunner().invoke(
            app,
            ["rollouts", "collect", "--env", "toolsandbox", "--policy", f"scripted:{answers}", "--tasks", task, *sets],
        )
    assert res.exit_code == 0, res.output
    assert server.requests and server.requests[0]["model"] == "sim-user"
    assert "role play as a user" in server.requests[0]["messages"][0]["content"]  # ToolSandbox's user instruction
    with Store(f"sqlite:///{tmp_path / 'gapforge.db'}") as store:
        (episode,) = store.episodes(run_id_in(res.output))
    assert episode.termination == "done" and episode.turns == 1 and episode.score_info["termination"] == "user_end"


@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    os.environ.get("GAPFORGE_TOOLSANDBOX_SWEEP") != "1", reason="full sweep: set GAPFORGE_TOOLSANDBOX_SWEEP=1"
)
def test_full_parity_sweep(env: ParityEnv) -> None:
    from gapforge.envs.toolsandbox.metrics import paper_metrics

    mismatches, similarity = [], {}
    for task in env.task_ids():
        through_adapter, own, _ = _parity(env, task)
        similarity[task] = through_adapter
        if abs(through_adapter - own) > 1e-9:
            mismatches.append((task, through_adapter, own))
    categories = {t: env.task_categories(t) for t in env.task_ids()}
    categories.update({s["name"]: s["categories"] for s in catalog()["scenarios"] if s["name"] in env.excluded()})
    for cat, m in paper_metrics(similarity, categories, env.excluded()).items():
        print(f"{cat:26s} run {m.run:3d} perfect {m.perfect:3d} mean {m.mean_similarity:.3f} excluded {m.excluded}")
    print(
        f"toolsandbox parity: {sum(v == 1.0 for v in similarity.values())}/{len(similarity)} perfect, {len(mismatches)} mismatches {mismatches}"
    )
    assert not mismatches


@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    os.environ.get("GAPFORGE_TOOLSANDBOX_SWEEP") != "1", reason="full sweep: set GAPFORGE_TOOLSANDBOX_SWEEP=1"
)
def test_full_stand_in_parity_sweep(stand_in: ParityEnv) -> None:
    network = [t for t in stand_in.task_ids() if stand_in.network_tools(t)]
    assert len(network) == 34
    mismatches, similarity = [], {}
    for task in network:
        adapter, own, info, _ = _stand_in_parity(stand_in, task)
        similarity[task] = adapter
        print(
            f"{task:90s} {adapter:.4f} stand-in calls {info['stand_in_network']['calls']} misses {info['stand_in_network']['misses']}"
        )
        if abs(adapter - own) > 1e-9:
            mismatches.append((task, adapter, own))
    print(
        f"stand-in parity: {sum(v == 1.0 for v in similarity.values())}/{len(similarity)} perfect, "
        f"mean {sum(similarity.values()) / len(similarity):.3f}, {len(mismatches)} mismatches {mismatches}"
    )
    assert not mismatches


def test_rollouts_collect_stores_toolsandbox_episodes(tmp_path) -> None:
    from gapforge.agents.policy import ChatModelPolicy
    from gapforge.agents.rollouts import CollectPlan, collect
    from gapforge.agents.scripted import ScriptedChatModel
    from gapforge.store import Store

    probe = make_env("toolsandbox:single_tool_call")
    tasks = probe.task_ids()[:2]
    families = {t: probe.task_family(t) for t in tasks}
    probe.close()
    policy = ChatModelPolicy(
        ScriptedChatModel.from_dict({"policy": {"repeat": "Sorry, I cannot do that."}}), name="refuser"
    )
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        run_id = store.create_run("rollouts", {})
        plan = CollectPlan(
            run_id=run_id, env="toolsandbox:single_tool_call", tasks=tasks, samples=1, concurrency=2, max_turns=4
        )
        result = asyncio.run(
            collect(
                plan,
                make_env=lambda: make_env("toolsandbox:single_tool_call"),
                policy=policy,
                sink=store,
                families=families,
            )
        )
        assert result.ran == 2
        rows = store.episodes(run_id)
        assert {r.task_id for r in rows} == set(tasks) and {r.task_family for r in rows} == {"single_tool_call"}
        # the scripted user ends at the agent's first text turn; refusing a doable task earns no milestone
        assert all(
            r.termination == "done" and r.turns == 1 and r.reward < 1.0 and r.messages[0]["role"] == "system"
            for r in rows
        )
    finally:
        store.close()
