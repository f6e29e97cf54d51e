"""A synthetic training env written by hand for examples/my_agent_env.py:BillingEnv (docs/your-agent.md, "Offline: write a
synthetic env by hand, validate it, train on it"; the SDK: docs/sdk.md).

Capability: read the invoice before answering about it or acting on it. Every seed makes a few invoices and one
request: an amount question, or a refund that the 30-day rule allows or forbids. The tools are the target's three,
with its names, parameters and result formats. Reward: the lookup of the asked invoice before any answer or write
(1 point), the right outcome (2 points: the amount said; the refund made once and nothing else written; a refusal
that gives the invoice's age).

    gapforge env validate examples/my_agent_synthetic_env.py --target examples/my_agent_env.py:BillingEnv
"""

from __future__ import annotations

import json
from typing import Literal

from envs.sdk import SyntheticEnv, ToolError, tool

POLICY = (
    "You are Acme billing support. Look an invoice up with get_invoice before you answer about it or act on it. "
    "Refund an invoice only if it is under 30 days old; otherwise refuse politely and say how old it is."
)
ASK = {"amount": "How much was invoice {id}?", "refund": "Please refund invoice {id}."}


class InvoiceLookupEnv(SyntheticEnv):
    capability = "invoice_lookup"
    description = "Look the invoice up before stating its amount or deciding a refund, and act on what the record says."
    target = "my_agent_env.py:BillingEnv"
    policy = POLICY
    weights = {"looked_up": 1.0, "outcome": 2.0}
    max_turns = 6

    def generate(self, seed: int) -> dict:
        ids = self.rng.sample(range(10, 1000), 4)
        invoices = {f"INV-{i}": {"amount": self.rng.randint(5, 500), "age_days": self.rng.randint(1, 90)} for i in ids}
        asked = f"INV-{ids[0]}"
        kind = self.rng.choice(["amount", "refund", "refund"])
        return {
            "opening": ASK[kind].format(id=asked),
            "db": {"invoices": invoices, "writes": []},
            "truth": {"invoice": asked, "kind": kind, "refundable": invoices[asked]["age_days"] < 30},
        }

    @tool
    def get_invoice(self, invoice_id: str) -> dict:
        """Look up an invoice."""
        invoice = self.db["invoices"].get(invoice_id)
        if invoice is None:
            raise ToolError("no such invoice")
        return invoice

    @tool
    def refund_invoice(self, invoice_id: str) -> str:
        """Refund an invoice in full."""
        if invoice_id not in self.db["invoices"]:
            raise ToolError("no such invoice")
        self.db["writes"].append(["refund_invoice", invoice_id])
        return json.dumps("refunded")  # the target's results are JSON: a string result is a quoted string

    @tool
    def change_plan(self, account_id: str, plan: Literal["free", "pro"]) -> str:
        """Set an account's plan."""
        self.db["writes"].append(["change_plan", account_id, plan])
        return json.dumps("plan changed")

    def user_reply(self, text: str) -> str | None:
        return None  # one answer ends the conversation

    def reward(self) -> dict[str, float]:
        truth = self.scenario["truth"]
        invoice = self.scenario["db"]["invoices"][truth["invoice"]]
        lookups = [c["turn"] for c in self.calls_to("get_invoice", invoice_id=truth["invoice"])]
        acted = [c["turn"] for c in self.calls if c["ok"] and c["name"] != "get_invoice"] + [
            s["turn"] for s in self.said
        ]
        looked_up = float(bool(lookups) and (not acted or min(lookups) < min(acted)))
        said = " ".join(s["text"] for s in self.said)
        writes = self.db["writes"]
        if truth["kind"] == "amount":
            outcome = float(str(invoice["amount"]) in said and not writes)
        elif truth["refundable"]:
            outcome = float(writes == [["refund_invoice", truth["invoice"]]])
        else:
            outcome = float(not writes and str(invoice["age_days"]) in said)
        return {"looked_up": looked_up, "outcome": outcome}

    def solution(self, seed: int) -> list[dict]:
        truth = self.scenario["truth"]
        invoice = self.scenario["db"]["invoices"][truth["invoice"]]
        actions: list[dict] = [{"tool": "get_invoice", "arguments": {"invoice_id": truth["invoice"]}}]
        if truth["kind"] == "amount":
            return actions + [{"say": f"Invoice {truth['invoice']} was {invoice['amount']} dollars."}]
        if truth["refundable"]:
            return actions + [
                {"tool": "refund_invoice", "arguments": {"invoice_id": truth["invoice"]}},
                {"say": "Refunded in full."},
            ]
        return actions + [
            {"say": f"Sorry, invoice {truth['invoice']} is {invoice['age_days']} days old: past our 30-day limit."}
        ]
