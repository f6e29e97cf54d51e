"""The LLM roles of the GPU dry run, answered by a fake OpenAI server (tests.fakes.fake_openai): what a real analyst,
generator, reviewer and τ² user simulator would send back, reduced to rules, so every stage after them runs for real.

- discovery (a structured answer with `capabilities`): one capability, precondition_verification, with shown episodes;
- labeling (`labels`): LACKING on a FAILURE episode, PRESENT on a SUCCESS one (the header says which);
- generator (`code`): the SDK's example env for that capability (envs/examples/precondition_verification.py: it
  shares get_order_details / cancel_pending_order / return_delivered_order_items with τ² retail and passes the self-test);
- reviewer (`verdict`): accept;
- anything else is τ²'s user simulator: one request for help, then ###STOP### (so tasks that need no write succeed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "envs" / "examples" / "precondition_verification.py"
CAPABILITY = "precondition_verification"
DEFINITION = (
    "Before acting on a request, the agent checks that the action is allowed: it reads the record the action concerns "
    "and compares it with the policy's rules, and refuses with the reason when a precondition fails."
)


def prompt_text(req: dict[str, Any]) -> str:
    parts = []
    for m in req.get("messages") or []:
        c = m.get("content")
        parts.append(c if isinstance(c, str) else " ".join(p.get("text", "") for p in c or [] if isinstance(p, dict)))
    return "\n".join(parts)


def _answer(req: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    if req.get("tools"):  # function-calling structured output
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": req["tools"][0]["function"]["name"], "arguments": json.dumps(obj)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": json.dumps(obj)}


def _schema_keys(req: dict[str, Any]) -> set[str]:
    fmt = req.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") or {}
    if not schema and req.get("tools"):
        schema = req["tools"][0]["function"].get("parameters") or {}
    return set(schema.get("properties") or {})


def respond(req: dict[str, Any]) -> dict[str, Any]:
    keys, text = _schema_keys(req), prompt_text(req)
    if "capabilities" in keys:
        ids = [int(i) for i in re.findall(r"^### episode (\d+)$", text, flags=re.M)]
        return _answer(
            req, {"capabilities": [{"name": CAPABILITY, "definition": DEFINITION, "example_episode_ids": ids[:2]}]}
        )
    if "labels" in keys:
        failed = "outcome: FAILURE" in text
        label = {
            "capability": CAPABILITY,
            "label": "LACKING" if failed else "PRESENT",
            "evidence": "[1] " + ("acted or answered without checking first" if failed else "checked before acting"),
            "message_index": 1,
        }
        return _answer(req, {"labels": [label]})
    if "code" in keys:
        return _answer(req, {"code": EXAMPLE.read_text(), "notes": "the SDK's example env for this capability"})
    if "verdict" in keys:
        return _answer(
            req,
            {
                "capability_focus": True,
                "tools_match": True,
                "reward_gameable": False,
                "verdict": "accept",
                "problems": [],
                "fixes": [],
            },
        )
    said = sum(1 for m in req.get("messages") or [] if m.get("role") == "assistant")  # the simulated user's own turns
    return {"role": "assistant", "content": "###STOP###" if said else "Hi, I need some help with my order, please."}
