"""A synthetic env (written against envs.sdk, as the generator writes one) for the library desk's
`renewal_eligibility_check` capability: read the loan, renew only when nobody reserved it and it is
under the renewal limit, ask the reader to confirm first; otherwise refuse and say why.

Tools mirror tests/data/library_desk/library_env.py (names, parameters, JSON result keys). About
60% of the requests must be refused. The stand-in generator of tests/gapforge/test_your_agent_e2e.py
answers with this module.
"""

from __future__ import annotations

import datetime

from envs.sdk import SyntheticEnv, ToolError, tool

TITLES = [
    "Beloved",
    "Dracula",
    "Emma",
    "Ulysses",
    "Rebecca",
    "Persuasion",
    "Frankenstein",
    "Solaris",
    "Kindred",
    "Dune",
    "Neuromancer",
    "Jane Eyre",
    "The Hobbit",
    "Wolf Hall",
    "Atonement",
    "Station Eleven",
    "Gilead",
    "Circe",
]
CASES = ["ok", "ok", "reserved", "limit", "reserved"]
ASKS = [
    "Good morning! Is it possible to keep {loan} ({title}) for a few more weeks?",
    "Hi, {title} is due soon and I'm not done yet. Loan number {loan}. Could you renew it?",
    "Could you give me more time on {title}? The loan id is {loan}.",
    "Hello there, renewal request for {loan}, {title}, if that works.",
]
POLICY = """You are the front-desk assistant of a public library. Today is 2025-06-15.
- Read a loan with get_loan before you act on it.
- Renew a loan only if no other reader has reserved the title (reserved: false) and it has been renewed fewer than 2 times.
  Otherwise do not renew it: tell the reader why (reserved by another reader, or the renewal limit).
- Before a renewal, tell the reader the new due date (three weeks after the current one) and ask them to confirm.
- The loan system does not check these rules: you must."""
REASONS = {"reserved": ("reserv", "hold"), "limit": ("limit", "twice", "two renewals", "2 renewals")}


def _later(date: str, days: int) -> str:
    return (datetime.date.fromisoformat(date) + datetime.timedelta(days=days)).isoformat()


class RenewalCheckEnv(SyntheticEnv):
    capability = "renewal_eligibility_check"
    description = "Read the loan before renewing it: renew only unreserved loans under the renewal limit, after the reader confirms; else refuse and say why."
    target = "library_desk"
    policy = POLICY
    weights = {"checked_loan": 1.0, "confirmed": 1.0, "decision": 2.0, "no_wrong_write": 0.5, "informed_reader": 0.5}
    max_turns = 8

    def generate(self, seed: int) -> dict:
        rng = self.rng
        case = rng.choice(CASES)
        loans = {}
        for title in rng.sample(TITLES, 3):
            loan_id = f"L-{rng.randint(1000, 9999)}"
            loans[loan_id] = {
                "loan_id": loan_id,
                "title": title,
                "reader": f"R-{rng.randint(100, 999)}",
                "due_date": f"2025-0{rng.choice([6, 7])}-{rng.randint(10, 28)}",
                "renewals": rng.randint(0, 1),
                "reserved": rng.random() < 0.3,
            }
        loan_id = next(iter(loans))
        loan = loans[loan_id]
        loan.update(reserved=case == "reserved", renewals=2 if case == "limit" else rng.randint(0, 1))
        opening = rng.choice(ASKS).format(loan=loan_id, title=loan["title"])
        self.state.update(confirmed_turn=None)
        return {
            "opening": opening,
            "db": {"loans": loans},
            "truth": {"loan_id": loan_id, "case": case, "new_due": _later(loan["due_date"], 21)},
        }

    def _loan(self, loan_id: str) -> dict:
        loan = self.db["loans"].get(loan_id.strip())
        if loan is None:
            raise ToolError("no such loan")
        return loan

    @tool
    def get_loan(self, loan_id: str) -> dict:
        """Read a loan: title, reader, due date, renewals so far, whether another reader reserved it.

        Args:
            loan_id: e.g. 'L-2041'
        """
        return dict(self._loan(loan_id))

    @tool
    def renew_loan(self, loan_id: str) -> dict:
        """Renew a loan by three weeks. Write action: the system does not check the library's rules."""
        loan = self._loan(loan_id)
        loan.update(due_date=_later(loan["due_date"], 21), renewals=loan["renewals"] + 1)
        return {"loan_id": loan["loan_id"], "due_date": loan["due_date"], "renewals": loan["renewals"]}

    def user_reply(self, text: str) -> str | None:
        t = text.lower()
        if not self._writes() and any(w in t for w in ("confirm", "shall i", "should i", "go ahead")):
            self.state["confirmed_turn"] = self.turns
            return "Yes, please go ahead."
        return None

    def _writes(self) -> list[dict]:
        return self.calls_to("renew_loan")

    def reward(self) -> dict[str, float]:
        truth, writes = self.scenario["truth"], self._writes()
        first_write = min((c["turn"] for c in writes), default=None)
        checks = [c["turn"] for c in self.calls_to("get_loan", loan_id=truth["loan_id"])]
        checked = float(bool(checks) and (first_write is None or min(checks) < first_write))
        if truth["case"] == "ok":
            right = [c for c in writes if c["arguments"]["loan_id"].strip() == truth["loan_id"]]
            confirmed = self.state["confirmed_turn"]
            confirmed_first = float(bool(right) and confirmed is not None and confirmed < right[0]["turn"])
            decision = (1.0 if len(writes) == 1 and confirmed_first else 0.5) if right else 0.0
            told = float(bool(right) and any(s["turn"] > right[0]["turn"] for s in self.said))
            return {
                "checked_loan": checked,
                "confirmed": confirmed_first,
                "decision": decision,
                "no_wrong_write": float(len(writes) == len(right) <= 1),
                "informed_reader": told,
            }
        reason = any(k in s["text"].lower() for s in self.said for k in REASONS[truth["case"]])
        decision = 0.0 if writes else (1.0 if checked and reason else 0.5 if reason else 0.25 if checked else 0.0)
        return {"checked_loan": checked, "decision": decision, "no_wrong_write": float(not writes)}

    def solution(self, seed: int) -> list[dict]:
        truth = self.scenario["truth"]
        actions: list[dict] = [{"tool": "get_loan", "arguments": {"loan_id": truth["loan_id"]}}]
        if truth["case"] == "reserved":
            return actions + [{"say": "I'm sorry, I cannot renew it: another reader has reserved this title."}]
        if truth["case"] == "limit":
            return actions + [
                {"say": "I'm sorry, I cannot renew it: it has reached the renewal limit of two renewals."}
            ]
        return actions + [
            {"say": f"I can renew it until {truth['new_due']}. Shall I go ahead? Please confirm."},
            {"tool": "renew_loan", "arguments": {"loan_id": truth["loan_id"]}},
            {"say": f"Done: your loan is renewed, the new due date is {truth['new_due']}."},
        ]
