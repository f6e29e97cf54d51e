"""A user's own target env outside gapforge's package: the front desk of a public library.

Loaded as `tests/data/library_desk/library_env.py:LibraryDeskEnv`. Three tools, six tasks in three
families, a scripted reader, and a score on what the agent did. The planted failure mode: the loan
system renews any loan, so an agent that renews without reading the loan first (reserved by another
reader, or at the renewal limit) fails the `renewal_refusal` tasks; doing nothing passes them.
"""

import datetime
import json

from gapforge.protocol import Message, Score, StepResult, tool_schema

POLICY = """You are the front-desk assistant of the Riverside Public Library. Today is 2025-06-15.
- Read a loan with get_loan before you act on it or answer a question about it.
- Renew a loan only if no other reader has reserved the title (reserved: false) and it has been renewed fewer than 2 times.
  Otherwise do not renew it: tell the reader why (reserved by another reader, or the renewal limit).
- Before a renewal, tell the reader the new due date (three weeks after the current one) and ask them to confirm.
- The loan system does not check these rules: you must."""
LOANS = {
    "L-2041": {
        "title": "The Left Hand of Darkness",
        "reader": "R-118",
        "due_date": "2025-07-01",
        "renewals": 0,
        "reserved": False,
    },
    "L-3307": {
        "title": "A Brief History of Time",
        "reader": "R-240",
        "due_date": "2025-06-24",
        "renewals": 1,
        "reserved": False,
    },
    "L-1188": {"title": "Middlemarch", "reader": "R-118", "due_date": "2025-06-20", "renewals": 0, "reserved": True},
    "L-5120": {"title": "The Overstory", "reader": "R-377", "due_date": "2025-06-28", "renewals": 2, "reserved": False},
    "L-6402": {"title": "Piranesi", "reader": "R-240", "due_date": "2025-07-09", "renewals": 1, "reserved": True},
}
TASKS = {  # task id -> (family, the reader's request, the loan, the renewals that solve it, text the answer must hold)
    "renew-001": (
        "renewal",
        "Hello, could I keep loan L-2041 a little longer? I haven't finished the book.",
        "L-2041",
        ["L-2041"],
        None,
    ),
    "renew-002": ("renewal", "I'd like another three weeks with L-3307, please.", "L-3307", ["L-3307"], None),
    "refusal-001": ("renewal_refusal", "Please renew L-1188 for me, I'm only halfway through.", "L-1188", [], None),
    "refusal-002": ("renewal_refusal", "Can you extend L-5120 once more? Exams are coming up.", "L-5120", [], None),
    "due-001": ("due_date", "When do I have to bring L-2041 back?", "L-2041", [], "2025-07-01"),
    "due-002": ("due_date", "What is the return date for my loan L-6402?", "L-6402", [], "2025-07-09"),
}
CONFIRM_WORDS = ("confirm", "shall i", "should i", "go ahead")


def _later(date: str, days: int) -> str:
    return (datetime.date.fromisoformat(date) + datetime.timedelta(days=days)).isoformat()


class LibraryDeskEnv:
    def __init__(self, max_user_turns: int = 2) -> None:
        self.max_user_turns = max_user_turns

    def task_ids(self) -> list[str]:
        return list(TASKS)

    def task_family(self, task_id: str) -> str:
        return TASKS[task_id][0]

    def tools(self) -> list[dict]:
        return [
            tool_schema(
                "get_loan",
                "Read a loan: title, reader, due date, renewals so far, whether another reader reserved it.",
                {"loan_id": {"type": "string", "description": "e.g. 'L-2041'"}},
            ),
            tool_schema(
                "renew_loan",
                "Renew a loan by three weeks. Write action: the system does not check the library's rules.",
                {"loan_id": {"type": "string"}},
            ),
            tool_schema("search_catalog", "Search the catalogue by title words.", {"query": {"type": "string"}}),
        ]

    def reset(self, task: str) -> list[Message]:
        self.task = TASKS[task]
        self.loans = {k: dict(v) for k, v in LOANS.items()}
        self.renewed: list[str] = []
        self.read_before_write = False
        self.said, self.user_turns = "", 0
        return [Message.system(POLICY), Message.user(self.task[1])]

    def step(self, message: Message) -> StepResult:
        if not message.tool_calls:
            text = message.content or ""
            self.said += text + "\n"
            self.user_turns += 1
            if not self.renewed and any(w in text.lower() for w in CONFIRM_WORDS):
                return StepResult(
                    messages=[Message.user("Yes, please go ahead.")], done=self.user_turns >= self.max_user_turns
                )
            return StepResult(messages=[Message.user("Thanks, bye.")], done=True)
        return StepResult(messages=[self._call(call) for call in message.tool_calls])

    def _call(self, call) -> Message:
        loan = self.loans.get(str(call.arguments.get("loan_id", "")).strip())
        if call.name == "get_loan":
            if loan is not None and call.arguments.get("loan_id") == self.task[2] and not self.renewed:
                self.read_before_write = True
            out = (
                "Error: no such loan"
                if loan is None
                else json.dumps({"loan_id": call.arguments["loan_id"], **loan}, sort_keys=True)
            )
        elif call.name == "renew_loan":
            if loan is None:
                out = "Error: no such loan"
            else:
                loan.update(due_date=_later(loan["due_date"], 21), renewals=loan["renewals"] + 1)
                self.renewed.append(call.arguments["loan_id"])
                out = json.dumps(
                    {"loan_id": call.arguments["loan_id"], "due_date": loan["due_date"], "renewals": loan["renewals"]},
                    sort_keys=True,
                )
        elif call.name == "search_catalog":
            words = str(call.arguments.get("query", "")).lower().split()
            hits = sorted({v["title"] for v in LOANS.values() if words and all(w in v["title"].lower() for w in words)})
            out = json.dumps({"matches": [{"title": t, "available": False} for t in hits]})
        else:
            out = f"Error: unknown tool {call.name}"
        return Message.tool(call.id, out, name=call.name)

    def score(self) -> Score:
        family, _, _, gold, must_say = self.task
        db = float(self.renewed == gold and (not gold or self.read_before_write))
        said = 1.0 if must_say is None else float(must_say in self.said and self.read_before_write)
        return Score(reward=db * said, success=db * said == 1.0, components={"db": db, "communicate": said})

    def close(self) -> None:
        pass
