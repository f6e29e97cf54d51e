"""A billing-support agent as a gapforge target: `gapforge rollouts collect --env examples/my_agent_env.py:BillingEnv`.

Three tools, a policy, four tasks with a scripted customer, and a score that checks what the agent *did*
(the invoices it refunded, the plan it set) and, for a question, what it said.
"""

import json

from gapforge.protocol import Message, Score, StepResult, tool_schema

POLICY = "You are Acme billing support. Refund an invoice only if it is under 30 days old; otherwise refuse politely."
INVOICES = {
    "INV-4": {"amount": 120, "age_days": 3},
    "INV-7": {"amount": 45, "age_days": 12},
    "INV-9": {"amount": 300, "age_days": 64},
}
TASKS = {  # task id -> (family, the customer's request, the writes that solve it, text the answer must hold)
    "refund-001": ("refund", "Please refund invoice INV-7.", [["refund_invoice", "INV-7"]], None),
    "refund-002": ("refusal", "Refund INV-9 now, please.", [], None),
    "plan-001": ("plan_change", "Move account A-3 to the pro plan.", [["change_plan", "A-3", "pro"]], None),
    "lookup-001": ("lookup", "How much was invoice INV-4?", [], "120"),
}


class BillingEnv:
    def __init__(self, max_user_turns: int = 2):
        self.max_user_turns = max_user_turns

    def task_ids(self):
        return list(TASKS)

    def task_family(self, task_id):
        return TASKS[task_id][0]

    def tools(self):
        return [
            tool_schema("get_invoice", "Look up an invoice.", {"invoice_id": {"type": "string"}}),
            tool_schema("refund_invoice", "Refund an invoice in full.", {"invoice_id": {"type": "string"}}),
            tool_schema(
                "change_plan",
                "Set an account's plan.",
                {"account_id": {"type": "string"}, "plan": {"type": "string", "enum": ["free", "pro"]}},
            ),
        ]

    def reset(self, task):
        self.task, self.writes, self.said, self.user_turns = TASKS[task], [], "", 0
        return [Message.system(POLICY), Message.user(self.task[1])]

    def step(self, message):
        if not message.tool_calls:  # the agent spoke: the customer thanks it and ends, or waits for an answer
            self.said += (message.content or "") + "\n"
            self.user_turns += 1
            return StepResult(messages=[Message.user("Thanks, bye.")], done=self.user_turns >= self.max_user_turns)
        results = []
        for call in message.tool_calls:
            args = call.arguments
            if call.name == "get_invoice":
                out = INVOICES.get(args.get("invoice_id"), "Error: no such invoice")
            elif call.name == "refund_invoice":
                self.writes.append([call.name, args.get("invoice_id")])
                out = "refunded"
            elif call.name == "change_plan":
                self.writes.append([call.name, args.get("account_id"), args.get("plan")])
                out = "plan changed"
            else:
                out = f"Error: unknown tool {call.name}"
            results.append(Message.tool(call.id, json.dumps(out), name=call.name))
        return StepResult(messages=results)

    def score(self):
        family, _, gold, must_say = self.task
        db = float(self.writes == gold)
        said = 1.0 if must_say is None else float(must_say in self.said)
        return Score(reward=db * said, success=db * said == 1.0, components={"db": db, "communicate": said})

    def close(self):
        pass
