"""The MCP target (envs/mcp) on the help-desk example: tools, episodes, rewards, fresh state, floors, collection."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP target needs the mcp extra: pip install 'gapforge[mcp]'")

from gapforge.agents.episode import run_episode  # noqa: E402
from gapforge.agents.rollouts import CollectPlan, collect  # noqa: E402
from gapforge.envs.errors import EnvError  # noqa: E402
from gapforge.envs.mcp import McpTargetEnv, pool  # noqa: E402
from gapforge.envs.protocol import Message, ToolCall  # noqa: E402
from gapforge.store import Store  # noqa: E402
from tests.data.mcp_policies import PLANS, PlanPolicy, do_nothing, promiser  # noqa: E402
from tests.envs.conformance import check_conformance  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HELPDESK = str(ROOT / "examples" / "helpdesk" / "target.yaml")
WRITES = {"verify_identity", "reset_password", "unlock_account", "add_to_group", "create_ticket"}


@pytest.fixture(scope="module", autouse=True)
def _end_parked_servers():
    yield
    pool.close_idle()


def _play(policy, env: McpTargetEnv, task: str):
    return asyncio.run(run_episode(policy, env, task, max_turns=8))


def test_tools_come_from_the_server_and_the_reset_tool_is_hidden() -> None:
    env = McpTargetEnv(HELPDESK)
    try:
        names = [t["function"]["name"] for t in env.tools()]
        assert set(names) == {"find_employee", "get_account", "list_groups", "list_tickets", "get_ticket"} | WRITES
        assert "reset_state" not in names
        verify = next(t for t in env.tools() if t["function"]["name"] == "verify_identity")["function"]
        assert verify["parameters"]["required"] == ["employee_id", "badge_last4"] and "badge" in verify["description"]
        assert env.name == "mcp:helpdesk" and len(env.task_ids()) == 16
        assert {env.task_family(t) for t in env.task_ids()} == {
            "password_reset",
            "account_unlock",
            "group_access",
            "must_refuse",
        }
        env.reset("pw-001")
        hidden = env.step(Message.assistant(tool_calls=[ToolCall(id="h", name="reset_state", arguments={})]))
        assert hidden.messages[0].content == "Error: unknown tool 'reset_state'"
    finally:
        env.close()
    check_conformance(lambda: McpTargetEnv(HELPDESK), ["pw-001", "rf-003"])


def test_every_task_is_solvable_and_scripted_user_ends_the_episode() -> None:
    env = McpTargetEnv(HELPDESK)
    try:
        for task in env.task_ids():
            ep = _play(PlanPolicy("gold"), env, task)
            assert (ep.reward, ep.success, ep.termination) == (1.0, True, "done"), (task, ep.score_info)
            assert ep.messages[3].content.startswith("employee id: ")  # the scripted user answered the facts asked
            assert ep.messages[-1].content == "Thank you, that's all I needed."
    finally:
        env.close()


def test_a_failed_episode_names_what_failed() -> None:
    """rf-001's account is on security hold: unlocking it and filing it resolved fails two of three checks."""
    env = McpTargetEnv(HELPDESK)
    try:
        ep = _play(PlanPolicy("never_refuse"), env, "rf-001")
        assert ep.reward == 0.0 and not ep.success
        assert ep.components == {"state": 0.0, "phrases": 1.0}  # the ticket id was told: only the decision is wrong
        failed = ep.score_info["failed_checks"]
        assert failed[0].startswith("get_account(employee_id='E-1003'): locked is false, expected true")
        assert "status is 'resolved', expected 'open'" in failed[1]
        assert ep.score_info["missing_phrases"] == [] and ep.score_info["checks"] == 3
    finally:
        env.close()


def test_degenerate_policies_score_at_the_floor() -> None:
    env = McpTargetEnv(HELPDESK)
    try:
        results = {}
        for policy in (do_nothing(), promiser(), PlanPolicy("every_write"), PlanPolicy("never_refuse")):
            eps = [_play(policy, env, t) for t in env.task_ids()]
            results[policy.name] = (sum(e.reward for e in eps) / len(eps), sum(e.success for e in eps))
    finally:
        env.close()
    assert results["do-nothing"] == (0.0, 0) and results["promiser"] == (0.0, 0)
    assert results["helpdesk-every_write"] == (0.0, 0)
    # acting without checking the policy's preconditions passes exactly the 10 allowed tasks
    assert results["helpdesk-never_refuse"] == (10 / 16, 10)
    assert sum(p.allowed for p in PLANS.values()) == 10


def test_reset_tool_gives_every_episode_a_fresh_state_also_across_instances() -> None:
    env = McpTargetEnv(HELPDESK)
    env.reset("ul-001")
    env.step(
        Message.assistant(
            tool_calls=[
                ToolCall(id="v", name="verify_identity", arguments={"employee_id": "E-1002", "badge_last4": "7310"}),
                ToolCall(id="u", name="unlock_account", arguments={"employee_id": "E-1002"}),
            ]
        )
    )
    assert _account(env, "E-1002")["locked"] is False
    env.reset("ul-001")
    assert _account(env, "E-1002")["locked"] is True
    again = env.step(
        Message.assistant(tool_calls=[ToolCall(id="u", name="unlock_account", arguments={"employee_id": "E-1002"})])
    )
    assert "not verified" in (again.messages[0].content or "")  # the verification went with the reset too
    env.step(
        Message.assistant(
            tool_calls=[
                ToolCall(id="v", name="verify_identity", arguments={"employee_id": "E-1002", "badge_last4": "7310"}),
                ToolCall(id="u", name="unlock_account", arguments={"employee_id": "E-1002"}),
            ]
        )
    )
    conn = env._conn
    env.close()  # the used server is parked ...
    other = McpTargetEnv(HELPDESK)
    try:
        assert other._conn is conn  # ... and the next instance takes it
        other.reset("ul-001")
        assert _account(other, "E-1002")["locked"] is True
    finally:
        other.close()


def test_collect_stores_mcp_episodes_with_rewards(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        probe = McpTargetEnv(HELPDESK)
        tasks = ["pw-002", "ul-001", "ga-002", "rf-004"]
        families = {t: probe.task_family(t) for t in tasks}
        probe.close()
        run_id = store.create_run("rollouts", {})
        plan = CollectPlan(run_id=run_id, env="mcp:helpdesk", tasks=tasks, samples=2, concurrency=3, max_turns=8)
        res = asyncio.run(
            collect(
                plan, make_env=lambda: McpTargetEnv(HELPDESK), policy=PlanPolicy("gold"), sink=store, families=families
            )
        )
        assert (res.planned, res.ran, res.infra_failures) == (8, 8, [])
        rows = store.episodes(run_id)
        assert {(r.task_id, r.sample) for r in rows} == {(t, s) for t in tasks for s in range(2)}
        assert all(r.reward == 1.0 and r.success and r.termination == "done" for r in rows)
        assert {r.task_family for r in rows} == {"password_reset", "account_unlock", "group_access", "must_refuse"}
        assert all(m["role"] != "tool" or m["name"] != "reset_state" for r in rows for m in r.messages)
        res = asyncio.run(
            collect(plan, make_env=lambda: McpTargetEnv(HELPDESK), policy=do_nothing(), sink=store, families=families)
        )
        assert res.ran == 0 and res.skipped == 8
    finally:
        store.close()


def test_llm_user_plays_the_persona_and_stops(tmp_path: Path) -> None:
    from gapforge.agents.scripted import ScriptedChatModel

    user_model = ScriptedChatModel.from_dict(
        {"user": ["E-1008, badge 6650.", "Thanks! ###STOP###"]}, default_prompt="user"
    )
    with pytest.raises(EnvError, match="needs a user model"):
        McpTargetEnv(HELPDESK, user="llm")
    env = McpTargetEnv(HELPDESK, user="llm", user_model=user_model)
    try:
        env.reset("pw-004")
        first = env.step(Message.assistant("Your employee id and badge digits, please?"))
        assert first.messages[0].content == "E-1008, badge 6650." and not first.done
        last = env.step(Message.assistant("Sent."))
        assert last.done and last.info == {"termination": "user_stop"}
        assert env.score().info["user_prompt"] == "mcp_user_simulator@1"
    finally:
        env.close()


def _account(env: McpTargetEnv, employee_id: str) -> dict:
    return json.loads(env._conn.call("get_account", {"employee_id": employee_id}).text)
