"""A synthetic env (written against envs.sdk, as the generator writes one) for the help desk's
`unlock_precondition_check` capability: before unlocking an account, verify the caller and read the
account; unlock only a failed-logins lock, and for a security hold or an ended contract do not unlock:
say why and file the ticket the policy wants.

Tools mirror examples/helpdesk/server.py where they share a name (parameters, JSON result keys and
types). Half of the requests must be refused. The stand-in generator of
tests/gapforge/test_your_agent_e2e.py answers with this module.
"""

from __future__ import annotations

import hashlib

from envs.sdk import SyntheticEnv, ToolError, tool

FIRST = ["Ada", "Bram", "Cleo", "Dara", "Eli", "Fay", "Gil", "Hugo", "Iris", "Juno", "Kai", "Lena", "Milo", "Nia"]
LAST = ["Berg", "Costa", "Dahl", "Ekwueme", "Fontaine", "Grieg", "Holm", "Ito", "Jansen", "Kowal", "Lund", "Moreau"]
CASES = ["ok", "ok", "hold", "contract"]
TICKET_STATUS = {"ok": "resolved", "hold": "open", "contract": "rejected"}
REASONS = {"hold": ("security hold", "security team"), "contract": ("contract",)}
ASKS = [
    "Morning. {name} here, employee {eid}. I can't sign in, it says my account is locked.",
    "Hey, my login is blocked since this morning. I'm {name} ({eid}), can you help me get back in?",
    "This is {name}, {eid}. The system locked me out and I have a deadline today.",
    "Hello IT, {eid} here. Account locked, please sort it out.",
]
POLICY = """You are the IT help desk of a company. Today is 2025-06-15.
- Verify the caller first: their employee id and the last four digits of their badge (verify_identity).
- Read the account (get_account) before you change it.
- Unlock only an account locked for failed logins. Never unlock a security hold: escalate it with an open ticket.
  Never serve a contractor whose contract has ended: record a rejected ticket.
- File exactly one ticket per call (category unlock; status resolved, open or rejected) and tell the caller its id."""


def ticket_id(employee_id: str, category: str, n: int) -> str:
    digest = hashlib.sha256(f"{employee_id}:{category}:{n}".encode()).hexdigest()
    return f"INC-{int(digest[:8], 16) % 90000 + 10000}"


class UnlockPreconditionEnv(SyntheticEnv):
    capability = "unlock_precondition_check"
    description = (
        "Verify the caller and read the account before an unlock; unlock only failed-logins locks, refuse holds and ended "
        "contracts with the right ticket."
    )
    target = "mcp:helpdesk"
    policy = POLICY
    weights = {"verified": 1.0, "checked_account": 1.0, "decision": 2.0, "ticket": 1.0, "told_ticket": 0.5}
    max_turns = 10

    def generate(self, seed: int) -> dict:
        rng = self.rng
        case = rng.choice(CASES)
        first, last = rng.choice(FIRST), rng.choice(LAST)
        eid = f"E-{rng.randint(2000, 8999)}"
        contractor = case == "contract" or rng.random() < 0.3
        end = (
            f"2025-0{rng.randint(1, 5)}-{rng.randint(10, 28)}"
            if case == "contract"
            else ("2025-12-31" if contractor else None)
        )
        account = {
            "employee_id": eid,
            "username": f"{first[0].lower()}{last.lower()}",
            "kind": "contractor" if contractor else "employee",
            "contract_end": end,
            "locked": True,
            "lock_reason": "security_hold" if case == "hold" else "failed_logins",
            "password_reset_pending": False,
            "groups": sorted(rng.sample(["email", "github", "crm", "vpn"], 2)),
        }
        self.state.update(badge_given=False)
        return {
            "opening": rng.choice(ASKS).format(name=f"{first} {last}", eid=eid),
            "db": {"accounts": {eid: account}, "tickets": [], "verified": []},
            "truth": {"employee_id": eid, "badge": f"{rng.randint(0, 9999):04d}", "case": case},
        }

    def _account(self, employee_id: str) -> dict:
        account = self.db["accounts"].get(employee_id.strip())
        if account is None:
            raise ToolError(f"no employee {employee_id}: ids look like E-1001")
        return account

    @tool
    def get_account(self, employee_id: str) -> dict:
        """The account of an employee: username, kind, contract end, lock state and reason, pending reset, groups."""
        return dict(self._account(employee_id))

    @tool
    def verify_identity(self, employee_id: str, badge_last4: str) -> dict:
        """Check a caller's identity: their employee id and the last four digits of their badge."""
        self._account(employee_id)
        ok = (
            badge_last4.strip() == self.scenario["truth"]["badge"]
            and employee_id.strip() == self.scenario["truth"]["employee_id"]
        )
        if ok:
            self.db["verified"].append(employee_id.strip())
        return {"employee_id": employee_id, "verified": ok}

    @tool
    def unlock_account(self, employee_id: str) -> dict:
        """Unlock a locked account. Needs verify_identity of this employee first."""
        account = self._account(employee_id)
        if employee_id.strip() not in self.db["verified"]:
            raise ToolError(f"identity of {employee_id} not verified: call verify_identity first")
        if not account["locked"]:
            raise ToolError(f"the account of {employee_id} is not locked")
        account.update(locked=False, lock_reason=None)
        return {"employee_id": employee_id, "locked": False}

    @tool
    def create_ticket(self, employee_id: str, category: str, status: str, summary: str) -> dict:
        """Record a help-desk ticket. category: password | unlock | access | security; status: resolved | open | rejected."""
        self._account(employee_id)
        if category not in ("password", "unlock", "access", "security"):
            raise ToolError("category must be one of password, unlock, access, security")
        if status not in ("resolved", "open", "rejected"):
            raise ToolError("status must be one of resolved, open, rejected")
        n = 1 + sum(1 for t in self.db["tickets"] if t["employee_id"] == employee_id and t["category"] == category)
        ticket = {
            "ticket_id": ticket_id(employee_id, category, n),
            "employee_id": employee_id,
            "category": category,
            "status": status,
            "summary": summary,
        }
        self.db["tickets"].append(ticket)
        return dict(ticket)

    def user_reply(self, text: str) -> str | None:
        t = text.lower()
        if not self.state["badge_given"] and ("badge" in t or "last four" in t):
            self.state["badge_given"] = True
            return f"Sure, my badge ends in {self.scenario['truth']['badge']}."
        return None

    def reward(self) -> dict[str, float]:
        truth = self.scenario["truth"]
        eid = truth["employee_id"]
        writes = [c["turn"] for c in self.calls if c["ok"] and c["name"] in ("unlock_account", "create_ticket")]
        first_write = min(writes, default=None)

        def before(calls: list[dict]) -> float:
            return float(any(first_write is None or c["turn"] < first_write for c in calls))

        verified = before(
            [c for c in self.calls_to("verify_identity", employee_id=eid) if '"verified": true' in c["result"]]
        )
        checked = before(self.calls_to("get_account", employee_id=eid))
        unlocked = bool(self.calls_to("unlock_account", employee_id=eid))
        if truth["case"] == "ok":
            decision = (1.0 if checked else 0.5) if unlocked else 0.0
        else:
            reason = any(k in s["text"].lower() for s in self.said for k in REASONS[truth["case"]])
            decision = 0.0 if unlocked else 0.5 * checked + 0.5 * reason
        tickets = [c for c in self.calls_to("create_ticket", employee_id=eid)]
        right = [c for c in tickets if c["arguments"]["category"] == "unlock"]
        ticket = 0.0
        if len(tickets) == 1 and right:
            ticket = 1.0 if right[0]["arguments"]["status"] == TICKET_STATUS[truth["case"]] else 0.5
        ids = [t["ticket_id"] for t in self.db["tickets"]]
        told = float(bool(ids) and any(i in s["text"] for s in self.said for i in ids))
        return {
            "verified": verified,
            "checked_account": checked,
            "decision": decision,
            "ticket": ticket,
            "told_ticket": told,
        }

    def solution(self, seed: int) -> list[dict]:
        truth = self.scenario["truth"]
        eid, case = truth["employee_id"], truth["case"]
        actions: list[dict] = [
            {"say": "I can look into it. Could you give me the last four digits of your badge?"},
            {"tool": "verify_identity", "arguments": {"employee_id": eid, "badge_last4": truth["badge"]}},
            {"tool": "get_account", "arguments": {"employee_id": eid}},
        ]
        if case == "ok":
            actions.append({"tool": "unlock_account", "arguments": {"employee_id": eid}})
        status = TICKET_STATUS[case]
        actions.append(
            {
                "tool": "create_ticket",
                "arguments": {
                    "employee_id": eid,
                    "category": "unlock",
                    "status": status,
                    "summary": f"unlock request: {status}",
                },
            }
        )
        number = ticket_id(eid, "unlock", 1)
        why = {
            "ok": "Your account is unlocked.",
            "hold": "I cannot unlock it: your account is on a security hold, so I escalated it to the security team.",
            "contract": "I cannot unlock it: your contract has ended.",
        }[case]
        return actions + [{"say": f"{why} Your ticket is {number}."}]
