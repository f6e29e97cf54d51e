"""A small IT help-desk target (not a shop) for the prompt and contamination tests.

`HelpdeskTarget` speaks envs.protocol.TargetEnvironment: a policy document, four tools,
six tasks in two families, a scripted user that only opens. `store_run` stores one episode
per task (the lockout tasks fail) and the run's split. `HelpdeskSynthetic` is an SDK env on the
target's surface whose openings a test chooses (`with_openings`).
"""

from __future__ import annotations

import json
from typing import Any

from gapforge.envs.protocol import Message, Score, StepResult, tool_schema
from gapforge.envs.sdk import SyntheticEnv, tool

POLICY = """You are the IT help desk of Northwind Labs.
- Before resetting a password or unlocking an account, confirm the employee's identity with verify_identity (badge digits).
- Never unlock an account under a security hold: open an escalation for the security team instead.
- Tell the employee the ticket number you opened."""

TOOLS = [
    tool_schema(
        "verify_identity",
        "Check an employee's badge digits.",
        {"employee_id": {"type": "string"}, "badge_last4": {"type": "string"}},
    ),
    tool_schema(
        "get_account", "Read an employee's account: locked flag and lock reason.", {"employee_id": {"type": "string"}}
    ),
    tool_schema("unlock_account", "Unlock an employee's account.", {"employee_id": {"type": "string"}}),
    tool_schema(
        "escalate_ticket",
        "Open an escalation ticket for a team.",
        {"employee_id": {"type": "string"}, "team": {"type": "string"}},
    ),
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]

TASKS = {  # task -> (family, opening)
    "hd-lock-001": ("lockout", "My laptop login says my account is locked since this morning, please help."),
    "hd-lock-002": ("lockout", "My laptop login says my account is locked since this morning, please help."),
    "hd-lock-003": ("lockout", "I typed my password wrong too many times and now I am locked out of the VPN."),
    "hd-lock-004": ("lockout", "Security flagged my account after the phishing drill and I cannot sign in anymore."),
    "hd-vpn-001": ("vpn", "The VPN client keeps dropping every ten minutes on the office wifi."),
    "hd-vpn-002": ("vpn", "The VPN client will not start after the update last night."),
}


class HelpdeskTarget:
    """The target env (scripted user that only opens; the reward is 1 after an escalation or an unlock)."""

    name = "helpdesk"

    def __init__(self) -> None:
        self._calls: list[str] = []

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def task_ids(self) -> list[str]:
        return sorted(TASKS)

    def task_family(self, task_id: str) -> str:
        return TASKS[task_id][0]

    def reset(self, task: Any) -> list[Message]:
        self._calls = []
        return [Message(role="system", content=POLICY), Message(role="user", content=TASKS[str(task)][1])]

    def step(self, message: Message) -> StepResult:
        out = []
        for call in message.tool_calls:
            self._calls.append(call.name)
            out.append(
                Message(
                    role="tool",
                    tool_call_id=call.id,
                    name=call.name,
                    content=json.dumps({"ok": True, "employee_id": "E-17"}),
                )
            )
        return StepResult(messages=out, done=not message.tool_calls)

    def score(self) -> Score:
        ok = any(n in ("unlock_account", "escalate_ticket") for n in self._calls)
        return Score(reward=float(ok), success=ok, components={"resolved": float(ok)})

    def close(self) -> None:
        pass


def episode(task: str, success: bool) -> list[dict[str, Any]]:
    """One stored episode of `task`: opening, identity check, the account read, then an unlock (wrong under a hold)."""
    result = {
        "employee_id": "E-17",
        "locked": True,
        "lock_reason": "security_hold" if task == "hd-lock-004" else "failed_logins",
    }
    return [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": TASKS[task][1]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "name": "verify_identity", "arguments": {"employee_id": "E-17", "badge_last4": "4821"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "verify_identity", "content": json.dumps({"verified": True})},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c2", "name": "get_account", "arguments": {"employee_id": "E-17"}}],
        },
        {"role": "tool", "tool_call_id": "c2", "name": "get_account", "content": json.dumps(result)},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c3", "name": "unlock_account", "arguments": {"employee_id": "E-17"}}],
        },
        {"role": "tool", "tool_call_id": "c3", "name": "unlock_account", "content": json.dumps({"unlocked": True})},
        {
            "role": "assistant",
            "content": "Your account is unlocked." if success else "Unlocked, you can sign in again.",
        },
    ]


def store_run(store: Any, run_id: str = "r-helpdesk", *, fraction: float = 0.5, seed: int = 0) -> str:
    """A run with one episode per help-desk task (lockouts fail) and its stored split."""
    from gapforge.agents.analysis.split import ensure_split

    store.create_run("trace", {"rollouts": {"env": "helpdesk"}}, run_id=run_id, versions={})
    for task, (family, _) in sorted(TASKS.items()):
        success = family == "vpn"
        messages = episode(task, success)
        store.put_episode(
            run_id,
            "helpdesk",
            task,
            0,
            policy="base",
            messages=messages,
            reward=float(success),
            success=success,
            components={},
            termination="user_stop",
            error=None,
            turns=4,
            timings={},
            task_family=family,
        )
    ensure_split(store, run_id, fraction=fraction, seed=seed)
    return run_id


class HelpdeskSynthetic(SyntheticEnv):
    """Unlock or escalate: the agent must read the account's lock reason first. Openings come from OPENINGS."""

    capability = "hold_check"
    description = "Read the lock reason before unlocking an account."
    target = "helpdesk"
    policy = POLICY
    OPENINGS: tuple[str, ...] = ("Hello, I cannot sign in to my workstation today.",)

    def generate(self, seed: int) -> dict:
        hold = self.rng.random() < 0.5
        opening = self.OPENINGS[seed % len(self.OPENINGS)]
        return {
            "opening": f"{opening} I am employee E-{seed + 100}.",
            "db": {"hold": hold, "employee_id": f"E-{seed + 100}"},
            "truth": {"hold": hold},
        }

    @tool
    def verify_identity(self, employee_id: str, badge_last4: str) -> dict:
        """Check an employee's badge digits."""
        return {"verified": employee_id == self.db["employee_id"]}

    @tool
    def get_account(self, employee_id: str) -> dict:
        """Read an employee's account: locked flag and lock reason."""
        return {
            "employee_id": employee_id,
            "locked": True,
            "lock_reason": "security_hold" if self.db["hold"] else "failed_logins",
        }

    @tool
    def unlock_account(self, employee_id: str) -> dict:
        """Unlock an employee's account."""
        return {"unlocked": True}

    @tool
    def escalate_ticket(self, employee_id: str, team: str) -> dict:
        """Open an escalation ticket for a team."""
        return {"ticket": f"T-{self.seed}"}

    def user_reply(self, text: str) -> str | None:
        return "Thanks, that is all." if "ticket" in text.lower() or "unlocked" in text.lower() else None

    def reward(self) -> dict[str, float]:
        read = self.called("get_account")
        right = self.called("escalate_ticket") if self.scenario["truth"]["hold"] else self.called("unlock_account")
        wrong = self.called("unlock_account") if self.scenario["truth"]["hold"] else self.called("escalate_ticket")
        return {"read": float(read), "decision": float(right and not wrong)}

    def solution(self, seed: int) -> list[dict]:
        eid = self.db["employee_id"]
        act = (
            {"tool": "escalate_ticket", "arguments": {"employee_id": eid, "team": "security"}}
            if self.scenario["truth"]["hold"]
            else {"tool": "unlock_account", "arguments": {"employee_id": eid}}
        )
        return [
            {"tool": "get_account", "arguments": {"employee_id": eid}},
            act,
            {"say": "Done: your account is unlocked or the ticket is open."},
        ]


def with_openings(*openings: str) -> type[HelpdeskSynthetic]:
    """A HelpdeskSynthetic whose seeds open with these texts in turn."""
    return type("HelpdeskWithOpenings", (HelpdeskSynthetic,), {"OPENINGS": tuple(openings), "__module__": __name__})
