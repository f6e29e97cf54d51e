"""The help desk's state and rules, without MCP: employees, accounts, groups, tickets.

Everything is in memory and deterministic: `Desk()` is always the same desk (fixed
"today" 2025-06-15), and ticket ids are derived from (employee, category, count), so
the same actions give the same ids in every episode. `server.py` exposes a `Desk`
as MCP tools; the tests read it directly to compute expected ids.

Rules the desk enforces itself (a tool error): password resets, unlocks and group
changes need `verify_identity` of that same employee in this session first; ids,
categories, statuses and groups must exist. Rules it does NOT enforce are the
policy's (policy.md): security holds, ended contracts, restricted groups, one ticket
per call with the right status — the agent has to check those itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

TODAY = "2025-06-15"
CATEGORIES = ("password", "unlock", "access", "security")
STATUSES = ("resolved", "open", "rejected")


class DeskError(Exception):
    """A request the desk refuses (bad id, identity not verified, ...): the tool answers with an error."""


@dataclass
class Employee:
    employee_id: str
    name: str
    email: str
    department: str
    kind: str  # "employee" | "contractor"
    badge_last4: str
    contract_end: str | None = None  # contractors only, ISO date


@dataclass
class Account:
    username: str
    locked: bool = False
    lock_reason: str | None = None  # "failed_logins" | "security_hold"
    password_reset_pending: bool = False
    groups: list[str] = field(default_factory=list)


@dataclass
class Ticket:
    ticket_id: str
    employee_id: str
    category: str
    status: str
    summary: str


_PEOPLE = [
    # id, name, department, kind, badge, contract end, locked reason, groups
    ("E-1001", "Ana Lima", "engineering", "employee", "4821", None, None, ["email", "github"]),
    ("E-1002", "Ben Okafor", "finance", "employee", "7310", None, "failed_logins", ["email", "finance-reports"]),
    ("E-1003", "Chloe Martin", "sales", "employee", "5566", None, "security_hold", ["email", "crm"]),
    ("E-1004", "Dev Patel", "engineering", "contractor", "2290", "2025-05-31", "failed_logins", ["email", "github"]),
    ("E-1005", "Eva Novak", "people", "employee", "9034", None, None, ["email", "hr-records"]),
    ("E-1006", "Femi Adeyemi", "engineering", "employee", "1177", None, "failed_logins", ["email", "github"]),
    ("E-1007", "Gus Larsen", "design", "contractor", "3402", "2025-12-31", None, ["email"]),
    ("E-1008", "Hana Sato", "marketing", "employee", "6650", None, None, ["email", "crm"]),
    ("E-1009", "Ivan Petrov", "support", "employee", "8123", None, "failed_logins", ["email", "crm"]),
    ("E-1010", "Jade Wong", "engineering", "employee", "4409", None, None, ["email", "github", "prod-db"]),
]

GROUPS = {
    # name: (self_service, description)
    "email": (True, "company mail and calendar"),
    "github": (True, "source code hosting"),
    "vpn": (True, "remote network access"),
    "wiki-editors": (True, "edit rights on the internal wiki"),
    "crm": (False, "customer records; needs manager approval"),
    "finance-reports": (False, "financial reporting; needs manager approval"),
    "hr-records": (False, "personnel files; needs manager approval"),
    "prod-db": (False, "production databases; needs manager approval"),
}


def ticket_id(employee_id: str, category: str, n: int) -> str:
    """The id of the n-th ticket (1-based) of this category for this employee: stable, not guessable without the tool."""
    digest = hashlib.sha256(f"{employee_id}:{category}:{n}".encode()).hexdigest()
    return f"INC-{int(digest[:8], 16) % 90000 + 10000}"


class Desk:
    """One help desk in its initial state; methods are the tools' logic and return JSON-ready dicts."""

    def __init__(self) -> None:
        self.employees: dict[str, Employee] = {}
        self.accounts: dict[str, Account] = {}
        for eid, name, dept, kind, badge, end, lock, groups in _PEOPLE:
            first, last = name.lower().split()
            self.employees[eid] = Employee(eid, name, f"{first}.{last}@northwind.example", dept, kind, badge, end)
            self.accounts[eid] = Account(
                username=f"{first[0]}{last}", locked=lock is not None, lock_reason=lock, groups=sorted(groups)
            )
        self.tickets: list[Ticket] = []
        self.verified: set[str] = set()
        self.failed_verifications: dict[str, int] = {}

    # ---- reads ----------------------------------------------------------
    def find_employee(self, query: str) -> dict:
        q = query.strip().lower()
        if not q:
            raise DeskError("give a name, an email or an employee id to search for")
        hits = [e for e in self.employees.values() if q in e.name.lower() or q == e.email or q == e.employee_id.lower()]
        return {"matches": [self._public(e) for e in hits]}

    def get_account(self, employee_id: str) -> dict:
        e, a = self._employee(employee_id), self.accounts[employee_id]
        return {
            "employee_id": e.employee_id,
            "username": a.username,
            "kind": e.kind,
            "contract_end": e.contract_end,
            "locked": a.locked,
            "lock_reason": a.lock_reason,
            "password_reset_pending": a.password_reset_pending,
            "groups": list(a.groups),
        }

    def list_groups(self) -> dict:
        return {"groups": [{"name": n, "self_service": s, "description": d} for n, (s, d) in GROUPS.items()]}

    def list_tickets(self, employee_id: str) -> dict:
        self._employee(employee_id)
        return {
            "employee_id": employee_id,
            "tickets": [vars(t).copy() for t in self.tickets if t.employee_id == employee_id],
        }

    def get_ticket(self, ticket_id: str) -> dict:
        for t in self.tickets:
            if t.ticket_id == ticket_id:
                return vars(t).copy()
        raise DeskError(f"no ticket {ticket_id}")

    # ---- writes ---------------------------------------------------------
    def verify_identity(self, employee_id: str, badge_last4: str) -> dict:
        e = self._employee(employee_id)
        ok = badge_last4.strip() == e.badge_last4
        if ok:
            self.verified.add(employee_id)
        else:
            self.failed_verifications[employee_id] = self.failed_verifications.get(employee_id, 0) + 1
        return {"employee_id": employee_id, "verified": ok}

    def reset_password(self, employee_id: str) -> dict:
        e, a = self._verified(employee_id)
        a.password_reset_pending = True
        return {"employee_id": employee_id, "reset_link_sent_to": e.email}

    def unlock_account(self, employee_id: str) -> dict:
        _, a = self._verified(employee_id)
        if not a.locked:
            raise DeskError(f"the account of {employee_id} is not locked")
        a.locked, a.lock_reason = False, None
        return {"employee_id": employee_id, "locked": False}

    def add_to_group(self, employee_id: str, group: str) -> dict:
        _, a = self._verified(employee_id)
        if group not in GROUPS:
            raise DeskError(f"no group '{group}': see list_groups")
        if group not in a.groups:
            a.groups = sorted([*a.groups, group])
        return {"employee_id": employee_id, "groups": list(a.groups)}

    def create_ticket(self, employee_id: str, category: str, status: str, summary: str) -> dict:
        self._employee(employee_id)
        if category not in CATEGORIES:
            raise DeskError(f"category must be one of {', '.join(CATEGORIES)}")
        if status not in STATUSES:
            raise DeskError(f"status must be one of {', '.join(STATUSES)}")
        n = 1 + sum(1 for t in self.tickets if t.employee_id == employee_id and t.category == category)
        ticket = Ticket(ticket_id(employee_id, category, n), employee_id, category, status, summary)
        self.tickets.append(ticket)
        return vars(ticket).copy()

    # ---- internals ------------------------------------------------------
    @staticmethod
    def _public(e: Employee) -> dict:
        return {
            "employee_id": e.employee_id,
            "name": e.name,
            "email": e.email,
            "department": e.department,
            "kind": e.kind,
        }

    def _employee(self, employee_id: str) -> Employee:
        if employee_id not in self.employees:
            raise DeskError(
                f"no employee {employee_id}: ids look like E-1001 (find_employee searches names and emails)"
            )
        return self.employees[employee_id]

    def _verified(self, employee_id: str) -> tuple[Employee, Account]:
        e = self._employee(employee_id)
        if employee_id not in self.verified:
            raise DeskError(f"identity of {employee_id} not verified: call verify_identity first")
        return e, self.accounts[employee_id]
