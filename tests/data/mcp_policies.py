"""Scripted policies for the help-desk example (examples/helpdesk), as envs.protocol.PolicyModel objects.

`PLANS` is the answer key of the 16 tasks: who calls, the badge digits they give,
whether the agent has to find them by email, the write they ask for, whether the
policy allows it, and the ticket the policy wants. The policies:

- `gold`: asks for id and badge, verifies, does the write only when allowed, files the
  policy's ticket, and tells the ticket id it read from the tool's answer.
- `never_refuse`: the same, but always does the asked write and files it resolved
  (an agent that acts without checking the policy's preconditions).
- `every_write`: verifies, then calls every write tool on the caller, files a resolved
  ticket and tells its id.
- `do_nothing`: greets and stops. `promiser`: says it is all done with a made-up ticket,
  without calling a tool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gapforge.envs.protocol import Message, ToolCall

TARGET = Path(__file__).resolve().parents[2] / "examples" / "helpdesk" / "target.yaml"

ASK = "Could you give me your employee id and the last four digits of your badge?"
CATEGORY = {"reset_password": "password", "unlock_account": "unlock", "add_to_group": "access"}


@dataclass(frozen=True)
class Plan:
    caller: str
    badge: str
    write: str  # the tool the caller's request needs
    target: str  # whose account it would change
    ticket: tuple[str, str]  # (category, status) the policy wants
    allowed: bool = True
    group: str | None = None
    email: str | None = None  # the caller does not know their id: found by email


PLANS: dict[str, Plan] = {
    "pw-001": Plan("E-1001", "4821", "reset_password", "E-1001", ("password", "resolved")),
    "pw-002": Plan(
        "E-1005", "9034", "reset_password", "E-1005", ("password", "resolved"), email="eva.novak@northwind.example"
    ),
    "pw-003": Plan("E-1007", "3402", "reset_password", "E-1007", ("password", "resolved")),
    "pw-004": Plan("E-1008", "6650", "reset_password", "E-1008", ("password", "resolved")),
    "ul-001": Plan("E-1002", "7310", "unlock_account", "E-1002", ("unlock", "resolved")),
    "ul-002": Plan("E-1006", "1177", "unlock_account", "E-1006", ("unlock", "resolved")),
    "ul-003": Plan("E-1009", "8123", "unlock_account", "E-1009", ("unlock", "resolved")),
    "ul-004": Plan(
        "E-1002", "7310", "unlock_account", "E-1002", ("unlock", "resolved"), email="ben.okafor@northwind.example"
    ),
    "ga-001": Plan("E-1001", "4821", "add_to_group", "E-1001", ("access", "resolved"), group="vpn"),
    "ga-002": Plan(
        "E-1008", "6650", "add_to_group", "E-1008", ("access", "open"), allowed=False, group="finance-reports"
    ),
    "ga-003": Plan("E-1005", "9034", "add_to_group", "E-1005", ("access", "resolved"), group="wiki-editors"),
    "ga-004": Plan("E-1007", "3402", "add_to_group", "E-1007", ("access", "open"), allowed=False, group="crm"),
    "rf-001": Plan("E-1003", "5566", "unlock_account", "E-1003", ("unlock", "open"), allowed=False),
    "rf-002": Plan("E-1004", "2290", "unlock_account", "E-1004", ("unlock", "rejected"), allowed=False),
    "rf-003": Plan("E-1001", "4821", "reset_password", "E-1002", ("password", "rejected"), allowed=False),
    "rf-004": Plan("E-1005", "9043", "reset_password", "E-1005", ("security", "open"), allowed=False),
}


def _write_call(plan: Plan, n: int) -> ToolCall:
    args: dict[str, Any] = {"employee_id": plan.target}
    if plan.write == "add_to_group":
        args["group"] = plan.group
    return ToolCall(id=f"c{n}", name=plan.write, arguments=args)


def _ticket(caller: str, category: str, status: str, n: int) -> ToolCall:
    return ToolCall(
        id=f"c{n}",
        name="create_ticket",
        arguments={
            "employee_id": caller,
            "category": category,
            "status": status,
            "summary": f"{category} request: {status}",
        },
    )


class PlanPolicy:
    """Plays a task's plan in four turns: ask, verify, act + ticket, tell the ticket id. `mode`: gold | never_refuse | every_write."""

    def __init__(self, mode: str = "gold") -> None:
        self.name, self.mode = f"helpdesk-{mode}", mode

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        plan = PLANS[_task_of(messages)]
        turn = sum(1 for m in messages if m.role == "assistant")
        if turn == 0:
            return Message.assistant(ASK)
        if turn == 1:
            calls = [ToolCall(id="c1", name="find_employee", arguments={"query": plan.email})] if plan.email else []
            calls.append(
                ToolCall(
                    id="c2", name="verify_identity", arguments={"employee_id": plan.caller, "badge_last4": plan.badge}
                )
            )
            return Message.assistant(tool_calls=calls)
        if turn == 2:
            return Message.assistant(tool_calls=self._act(plan))
        ticket = json.loads(messages[-1].content or "{}").get("ticket_id", "(none)")
        return Message.assistant(f"All set. Your ticket is {ticket}.")

    def _act(self, plan: Plan) -> list[ToolCall]:
        if self.mode == "every_write":
            group = ToolCall(
                id="c5", name="add_to_group", arguments={"employee_id": plan.caller, "group": plan.group or "vpn"}
            )
            return [
                ToolCall(id="c3", name="reset_password", arguments={"employee_id": plan.caller}),
                ToolCall(id="c4", name="unlock_account", arguments={"employee_id": plan.caller}),
                group,
                _ticket(plan.caller, CATEGORY[plan.write], "resolved", 6),
            ]
        if self.mode == "never_refuse":
            return [_write_call(plan, 3), _ticket(plan.caller, CATEGORY[plan.write], "resolved", 4)]
        calls = [_write_call(plan, 3)] if plan.allowed else []
        return [*calls, _ticket(plan.caller, *plan.ticket, 4)]

    async def aclose(self) -> None:
        return None


class TextPolicy:
    """Says the same text every turn, never calls a tool."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        return Message.assistant(self.text)

    async def aclose(self) -> None:
        return None


def do_nothing() -> TextPolicy:
    return TextPolicy("do-nothing", "Hello! How can I help you today?")


def promiser() -> TextPolicy:
    return TextPolicy(
        "promiser", "All done: your request is handled and recorded as ticket INC-10000. Have a nice day!"
    )


OPENINGS: dict[str, str] = {}


def _task_of(messages: list[Message]) -> str:
    """The task id of a help-desk conversation, from its opening (the policies see only messages)."""
    if not OPENINGS:
        doc = yaml.safe_load(TARGET.read_text(encoding="utf-8"))
        OPENINGS.update({t["opening"]: t["id"] for t in doc["tasks"]})
    return OPENINGS[messages[1].content or ""]
