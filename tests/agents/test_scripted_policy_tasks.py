"""A scripted policy's per-task scripts (`tasks:`) beside the shared `policy:` list, played as the collector plays
episodes (agents.rollouts.play_episode, which sets the episode key) against examples/my_agent_env.py."""

from __future__ import annotations

import asyncio
import functools
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gapforge.agents.errors import ModelError
from gapforge.agents.policy import ChatModelPolicy
from gapforge.agents.rollouts import play_episode
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.cli import app
from gapforge.config import PolicyConfig
from gapforge.envs.registry import make_env
from gapforge.store import Store
from gapforge.wiring import make_policy

ROOT = Path(__file__).resolve().parents[2]
BILLING = f"{ROOT / 'examples' / 'my_agent_env.py'}:BillingEnv?max_user_turns=1"  # one text answer ends an episode


def call(name: str, **arguments: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


SCRIPT = {
    "tasks": {
        "refund-001": [call("refund_invoice", invoice_id="INV-7"), "Refunded INV-7."],
        "plan-001": [
            {
                "content": "Switching the plan.",
                "tool_calls": [{"name": "change_plan", "arguments": {"account_id": "A-3", "plan": "pro"}}],
            },
            "Your plan is pro now.",
        ],
    },
    "policy": ["Shared one.", "Shared two."],
}


async def play(policy: ChatModelPolicy, *keys: tuple[str, int]) -> dict[tuple[str, int], object]:
    """The episodes of `keys` played at once, each on a fresh env."""
    factory = functools.partial(make_env, BILLING)
    episodes = await asyncio.gather(
        *(play_episode(policy, factory, t, s, max_turns=4, temperature=None, executor=None) for t, s in keys)
    )
    return dict(zip(keys, episodes, strict=True))


async def test_concurrent_tasks_each_replay_their_own_script_and_others_share_the_list() -> None:
    policy = ChatModelPolicy(ScriptedChatModel.from_dict(SCRIPT), name="scripted")
    keys = [
        ("refund-001", 0),
        ("plan-001", 0),
        ("refund-001", 1),
        ("plan-001", 1),
        ("refund-002", 0),
        ("lookup-001", 0),
    ]
    eps = await play(policy, *keys)
    for sample in (0, 1):  # sample 1 replays the task's script from its start
        refund, plan = eps["refund-001", sample], eps["plan-001", sample]
        assert [(c.name, c.arguments) for c in refund.tool_calls] == [("refund_invoice", {"invoice_id": "INV-7"})]
        assert refund.messages[-2].content == "Refunded INV-7." and refund.success
        assert [(c.name, c.arguments) for c in plan.tool_calls] == [
            ("change_plan", {"account_id": "A-3", "plan": "pro"})
        ]
        assert plan.messages[2].content == "Switching the plan." and plan.success
    shared = sorted(eps[k].messages[2].content for k in [("refund-002", 0), ("lookup-001", 0)])
    assert shared == ["Shared one.", "Shared two."]  # the two unlisted tasks consumed the shared list together
    assert policy.chat_model.used("policy") == 2 * 2 * 2 + 2


async def test_the_shared_list_alone_answers_tool_calls_in_order() -> None:
    script = {"policy": [call("get_invoice", invoice_id="INV-4"), "INV-4 was 120 dollars."]}
    eps = await play(ChatModelPolicy(ScriptedChatModel.from_dict(script), name="scripted"), ("lookup-001", 0))
    ep = eps["lookup-001", 0]
    assert [c.name for c in ep.tool_calls] == ["get_invoice"] and '"amount": 120' in ep.messages[3].content
    assert ep.success and ep.reward == 1.0


async def test_a_task_without_script_and_no_shared_list_and_a_script_run_out_name_the_task() -> None:
    only_tasks = ChatModelPolicy(
        ScriptedChatModel.from_dict({"tasks": SCRIPT["tasks"]}, source="answers.yaml"), name="s"
    )
    with pytest.raises(
        ModelError, match=r"no script for the task of episode 'lookup-001#0' and no shared 'policy' list"
    ):
        await play(only_tasks, ("lookup-001", 0))
    short = ChatModelPolicy(
        ScriptedChatModel.from_dict(
            {"tasks": {"refund-001": [call("refund_invoice", invoice_id="INV-7")]}}, source="answers.yaml"
        ),
        name="s",
    )
    with pytest.raises(
        ModelError,
        match=r"ran out of answers for task 'refund-001' \(episode 'refund-001#0'\) after 1; add more to answers.yaml",
    ):
        await play(short, ("refund-001", 0))


def test_a_file_with_neither_form_is_refused_when_the_policy_is_made(tmp_path: Path) -> None:
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump({"polcy": {"repeat": "typo"}}))
    with pytest.raises(ModelError, match=r"hold neither a 'policy:' list nor 'tasks:' scripts \(found: polcy\)"):
        make_policy(PolicyConfig(kind="scripted", scripted_path=str(path)))
    path.write_text(yaml.safe_dump({"tasks": ["refund-001"]}))
    with pytest.raises(ModelError, match="'tasks' must map task ids to answer lists"):
        make_policy(PolicyConfig(kind="scripted", scripted_path=str(path)))


def test_collect_with_a_per_task_file_and_one_line_for_a_file_with_neither(tmp_path: Path) -> None:
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump(SCRIPT))
    args = [
        "rollouts",
        "collect",
        "--env",
        BILLING,
        "--policy",
        f"scripted:{answers}",
        "--set",
        f"workspace={tmp_path / 'ws'}",
        "--set",
        "rollouts.concurrency=4",
        "--tasks",
        "refund-001,plan-001,refund-002",
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    answers.write_text("polcy:\n  repeat: hi\n")
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "hold neither a 'policy:' list nor 'tasks:' scripts" in refused.output
    assert "Traceback" not in refused.output


def test_at_concurrency_1_the_shared_list_follows_the_task_order_each_tasks_samples_in_turn(tmp_path: Path) -> None:
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({"policy": [f"answer {i}" for i in range(4)]}))
    args = [
        "rollouts",
        "collect",
        "--env",
        BILLING,
        "--policy",
        f"scripted:{answers}",
        "--set",
        f"workspace={tmp_path / 'ws'}",
        "--concurrency",
        "1",
        "--samples",
        "2",
        "--tasks",
        "plan-001,refund-001",
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    run = re.search(r"^run (r-\S+)", done.output, re.M).group(1)
    with Store(f"sqlite:///{tmp_path / 'ws' / 'gapforge.db'}") as store:
        said = {(e.task_id, e.sample): e.messages[2]["content"] for e in store.episodes(run)}
    assert said == {
        ("plan-001", 0): "answer 0",
        ("plan-001", 1): "answer 1",
        ("refund-001", 0): "answer 2",
        ("refund-001", 1): "answer 3",
    }


def test_the_worked_example_of_docs_your_agent_solves_every_task(tmp_path: Path) -> None:
    """The `solve.yaml` of docs/your-agent.md §4, collected as the page shows: every episode succeeds."""
    page = (ROOT / "docs" / "your-agent.md").read_text()
    block = re.search(r"```yaml\n# solve\.yaml\n(.*?)```", page, re.S)
    assert block, "docs/your-agent.md lost its solve.yaml example"
    (tmp_path / "solve.yaml").write_text(block.group(1))
    spec = f"{ROOT / 'examples' / 'my_agent_env.py'}:BillingEnv"
    done = CliRunner().invoke(
        app,
        [
            "rollouts",
            "collect",
            "--env",
            spec,
            "--policy",
            f"scripted:{tmp_path / 'solve.yaml'}",
            "--samples",
            "2",
            "--set",
            f"workspace={tmp_path / 'ws'}",
        ],
    )
    assert done.exit_code == 0, done.output
    run = re.search(r"^run (r-\S+)", done.output, re.M).group(1)
    with Store(f"sqlite:///{tmp_path / 'ws' / 'gapforge.db'}") as store:
        episodes = store.episodes(run)
    assert len(episodes) == 8 and all(e.success for e in episodes)
