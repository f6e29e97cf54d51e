"""`gapforge env check SPEC [--gold FILE]`: the reward floors of a user's target env and its gold ceiling, through the
CLI on the shipped example and on small envs written to a tmp file (a degenerate reward, a reset that fails)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cli_helpers import one_line_error
from typer.testing import CliRunner

from gapforge.check_policies import load_gold, make_policy
from gapforge.cli import app
from gapforge.envs.protocol import Message
from gapforge.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
BILLING = f"{ROOT / 'examples' / 'my_agent_env.py'}:BillingEnv"
BILLING_GOLD = ROOT / "examples" / "my_agent_gold.yaml"
runner = CliRunner()

SMALL_ENV = '''
from gapforge.protocol import Message, Score, StepResult, tool_schema


class SaysDoneEnv:
    """Rewards any episode in which the agent says "done": a reward a success-claiming policy collects."""

    def task_ids(self):
        return ["t1", "t2"]

    def task_family(self, task_id):
        return "f"

    def tools(self):
        return [tool_schema("lookup", "Look something up.", {"query": {"type": "string"}})]

    def reset(self, task):
        if task == "t2" and getattr(self, "fail_t2", False):
            raise RuntimeError("no fixture for t2")
        self.said = ""
        return [Message.system("Be helpful."), Message.user("Please close my ticket.")]

    def step(self, message):
        if message.tool_calls:
            return StepResult(messages=[Message.tool(c.id, "{}", name=c.name) for c in message.tool_calls])
        self.said += message.content or ""
        return StepResult(messages=[Message.user("Thanks.")], done=True)

    def score(self):
        ok = "done" in self.said.lower()
        return Score(reward=float(ok), success=ok)

    def close(self):
        pass


class ResetFailsEnv(SaysDoneEnv):
    fail_t2 = True
'''


@pytest.fixture
def small_env(tmp_path: Path) -> Path:
    path = tmp_path / "small_env.py"
    path.write_text(SMALL_ENV)
    return path


def _check(tmp_path: Path, *args: str):
    out = tmp_path / "reports" / "check.json"  # a directory not made yet: the check makes it
    res = runner.invoke(app, ["env", "check", *args, "--json", str(out), "--set", f"workspace={tmp_path / 'ws'}"])
    report = json.loads(out.read_text()) if out.is_file() else None
    return res, report


def _rows(report: dict) -> dict[str, dict]:
    return {r["policy"]: r for r in report["rows"]}


def test_the_example_holds_its_floors_and_its_gold_scores_one(tmp_path: Path) -> None:
    res, report = _check(tmp_path, BILLING, "--gold", str(BILLING_GOLD))
    assert res.exit_code == 0, res.output
    rows = _rows(report)
    assert list(rows) == ["do_nothing", "random_tool", "claim_success", "gold"] and report["passed"]
    assert rows["gold"]["episodes"] == 4 and rows["gold"]["mean_reward"] == 1.0 and rows["gold"]["success_rate"] == 1.0
    for kind in ("do_nothing", "random_tool", "claim_success"):
        assert rows[kind]["verdict"] == "ok" and rows[kind]["broken"] == [] and rows[kind]["env_failures"] == []
    # refusing is the task on refund-002 (its gold calls no tool): doing nothing earns it, shown but not held to the floor
    assert [(o["task"], o["reward"]) for o in rows["do_nothing"]["exempt"]] == [("refund-002", 1.0)]
    assert "do_nothing: exempt on refund-002 (reward 1.00, success)" in res.output


def test_without_gold_the_refusal_task_flags_the_text_only_policies(tmp_path: Path) -> None:
    res, report = _check(tmp_path, BILLING)
    assert res.exit_code == 1, res.output
    rows = _rows(report)
    assert "gold" not in rows and not report["passed"]
    assert {k: [o["task"] for o in r["broken"]] for k, r in rows.items()} == {
        "do_nothing": ["refund-002"],
        "random_tool": [],
        "claim_success": ["refund-002"],
    }
    assert "FLAGGED: do_nothing, claim_success" in res.output


def test_a_reward_for_saying_done_flags_claim_success(small_env: Path, tmp_path: Path) -> None:
    res, report = _check(tmp_path, f"{small_env}:SaysDoneEnv")
    assert res.exit_code == 1, res.output
    rows = _rows(report)
    assert rows["claim_success"]["verdict"] == "FLAGGED" and rows["claim_success"]["mean_reward"] == 1.0
    assert [(o["task"], o["reward"], o["success"]) for o in rows["claim_success"]["broken"]] == [
        ("t1", 1.0, True),
        ("t2", 1.0, True),
    ]
    assert rows["do_nothing"]["verdict"] == rows["random_tool"]["verdict"] == "ok"
    assert "claim_success: above its floor on 2 task(s)" in res.output and "t1: reward 1.00, success" in res.output


def test_a_reset_that_raises_is_that_tasks_env_error_not_a_score(small_env: Path, tmp_path: Path) -> None:
    res, report = _check(tmp_path, f"{small_env}:ResetFailsEnv", "--tasks", "t1,t2")
    assert res.exit_code == 1, res.output
    do_nothing = _rows(report)["do_nothing"]
    assert do_nothing["mean_reward"] == 0.0 and do_nothing["verdict"] == "FLAGGED" and do_nothing["broken"] == []
    [failure] = do_nothing["env_failures"]
    assert failure["task"] == "t2" and failure["reward"] is None and failure["termination"] == "env_error"
    assert "RuntimeError: no fixture for t2" in failure["error"]
    assert "t2: env_error: env.reset failed: RuntimeError: no fixture for t2" in res.output.replace("\n", "")


def test_an_unknown_task_in_the_gold_file_is_one_line(tmp_path: Path) -> None:
    gold = tmp_path / "gold.yaml"
    gold.write_text("refund-001: [Refunded.]\nrefund-404: [Refunded.]\n")
    res = runner.invoke(app, ["env", "check", BILLING, "--gold", str(gold), "--set", f"workspace={tmp_path / 'ws'}"])
    one_line_error(res, "task 'refund-404' is not a task of the env")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "refund-001:\n  - tool_call: [{name: refund_invoice}]\n",
            "task 'refund-001', turn 1: tool_call: Extra inputs are not permitted",
        ),
        ("refund-001:\n  - content: hi\n  - {}\n", "task 'refund-001', turn 2: a turn needs content or tool_calls"),
        ("refund-001: []\n", "task 'refund-001': the script is empty"),
        (
            "refund-001:\n  - tool_calls: [{name: refund, arguments: {invoice_id: INV-7}}]\n",
            "turn 1: tool 'refund' is not one of the env's tools",
        ),
        (
            "refund-001:\n  - tool_calls: [{name: get_invoice, arguments: INV-7}]\n",
            "turn 1: tool_calls.0.arguments: Input should be a valid dictionary",
        ),
        ("- a list\n", "expected a mapping task id -> list of turns"),
    ],
)
def test_a_malformed_gold_entry_names_the_task_and_the_fault(tmp_path: Path, text: str, needle: str) -> None:
    gold = tmp_path / "gold.yaml"
    gold.write_text(text)
    with pytest.raises(UsageError, match="gold file") as err:
        load_gold(gold, ["refund-001"], ["get_invoice", "refund_invoice"])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_json_gold_files_load_and_the_random_tool_move_is_seeded_by_task(tmp_path: Path) -> None:
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({"t1": ["Done.", {"tool_calls": [{"name": "lookup", "arguments": {"query": "x"}}]}]}))
    turns = load_gold(gold, ["t1"], ["lookup"])["t1"]
    assert [t.content for t in turns] == ["Done.", None] and turns[1].tool_calls[0].arguments == {"query": "x"}
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            },
        }
        for n in ("a", "b", "c")
    ]
    opening = [Message.user("order #W123 please")]

    async def first_move(task: str) -> Message:
        return await make_policy("random_tool", task).respond(opening, tools)

    moves = {
        task: [asyncio.run(first_move(task)).tool_calls[0].model_dump() for _ in range(2)]
        for task in ("t1", "t2", "t3")
    }
    assert all(a == b for a, b in moves.values())  # the same task: the same call
    assert len({json.dumps(m[0], sort_keys=True) for m in moves.values()}) > 1  # other tasks: other calls


def test_the_helpdesk_gold_file_covers_every_task_with_the_servers_tools() -> None:
    """Played in full, it scores 1.0 on all 16 tasks (`gapforge env check mcp:examples/helpdesk/target.yaml --gold ...`:
    ~10 s of MCP server starts, so not here); here: every task has a script and every call names an agent tool."""
    import yaml

    helpdesk = ROOT / "examples" / "helpdesk"
    task_ids = [t["id"] for t in yaml.safe_load((helpdesk / "target.yaml").read_text())["tasks"]]
    tools = [
        "find_employee",
        "get_account",
        "list_groups",
        "list_tickets",
        "get_ticket",
        "verify_identity",
        "reset_password",
        "unlock_account",
        "add_to_group",
        "create_ticket",
    ]  # server.py's, without the hidden reset_state
    gold = load_gold(helpdesk / "gold.yaml", task_ids, tools)
    assert list(gold) == task_ids
    assert all(any(c.name == "create_ticket" for turn in turns for c in turn.tool_calls) for turns in gold.values())


def test_a_task_without_gold_is_no_gold_and_a_script_shorter_than_the_envs_turns_ends_as_policy_error(
    small_env: Path, tmp_path: Path
) -> None:
    gold = tmp_path / "gold.yaml"
    gold.write_text("refund-001:\n  - tool_calls: [{name: refund_invoice, arguments: {invoice_id: INV-7}}]\n")
    res, report = _check(tmp_path, BILLING, "--tasks", "refund-001,plan-001", "--gold", str(gold))
    assert res.exit_code == 0, res.output
    assert _rows(report)["gold"]["episodes"] == 1 and _rows(report)["gold"]["no_gold"] == ["plan-001"]
    assert "gold: no gold for plan-001" in res.output

    (tmp_path / "long_env.py").write_text(
        SMALL_ENV + "\n\nclass LongEnv(SaysDoneEnv):\n    max_turns = 5  # the env's own turn limit\n"
    )
    gold.write_text("t1:\n  - tool_calls: [{name: lookup, arguments: {query: x}}]\n")
    res, report = _check(tmp_path, f"{tmp_path / 'long_env.py'}:LongEnv", "--gold", str(gold))
    assert res.exit_code == 1, res.output
    [ended] = _rows(report)["gold"]["broken"]  # asked for a second turn: the script has none; scored as it stands
    assert ended["task"] == "t1" and ended["termination"] == "policy_error" and ended["reward"] == 0.0
