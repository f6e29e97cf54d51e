"""The recorded analyst for offline runs: a ScriptedChatModel answering the discovery and labeling prompts from
agents/recorded/<env>_analyst.yaml. The dictionary is recorded data; example episode ids and labels come from
deterministic RULES over the compacted trajectory the prompt shows (the text a real analyst reads), so one recording
labels any policy's episodes honestly (the planted-deficit policy's or a taught tiny model's).
"""

from __future__ import annotations

import re
from collections.abc import Container
from pathlib import Path
from typing import Any, Callable

import yaml
from langchain_core.messages import BaseMessage

from gapforge.agents.errors import AnalysisError
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.envs.shop.tools import TRANSFER_TOOL, WRITE_TOOLS

RECORDED_DIR = Path(__file__).resolve().parent.parent / "recorded"
ACCOUNT = ("get_customer_details", "list_customer_orders", "get_order_details", *sorted(WRITE_TOOLS))
LINE = re.compile(r"^\[(\d+)\] (\w+)(?: ([\w-]+))?: (.*)$")
CALL = re.compile(r"CALL (\w+)\(")
CLAIM = re.compile(
    r"\b(i have|i've) (submitted|updated|cancelled|canceled|processed|changed|returned|exchanged|taken care)\b", re.I
)
REFUSAL = re.compile(r"\b(unfortunately|cannot|can't|unable|not eligible|not allowed|not possible)\b", re.I)
# the target's rejections of a call for an argument VALUE: malformed arguments, an unknown tool, an id or name that
# matches nothing (customer / order / product / payment method "not found"), item ids that are not in the order, an
# exchange's new item that is not a variant or is the old one. Not a rejection for the state of a record (an order
# "is 'delivered': only pending orders can ...") or for identity (precondition and identity rules judge those).
ARG_ERROR = re.compile(
    r"^Error: (bad arguments|unknown tool|.*\bnot found\b|items .* are not in order|new item .* (is not a variant|is the same as))",
    re.I,
)

Verdict = tuple[str, str, int | None]  # label, evidence, message index


class Trajectory:
    """The parts of a compacted episode the rules look at."""

    def __init__(self, text: str) -> None:
        self.calls: list[tuple[int, str]] = []
        self.texts: list[tuple[int, str]] = []  # assistant text
        self.users: list[tuple[int, str]] = []
        self.tool_results: list[tuple[int, str, str]] = []  # (index, tool name, result)
        for line in text.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            i, role, content = int(m.group(1)), m.group(2), m.group(4)
            if role == "assistant":
                self.calls += [(i, name) for name in CALL.findall(content)]
                said = " | ".join(p for p in content.split(" | ") if not p.startswith("CALL "))
                if said and said != "(empty)":
                    self.texts.append((i, said))
            elif role == "user":
                self.users.append((i, content))
            elif role == "tool":
                self.tool_results.append((i, m.group(3) or "", content))

    def first_call(self, names: Container[str]) -> int | None:
        return next((i for i, n in self.calls if n in names), None)


def precondition(t: Trajectory) -> Verdict:
    acts = [i for i, n in t.calls if n in WRITE_TOOLS] + [i for i, s in t.texts if CLAIM.search(s) or REFUSAL.search(s)]
    if not acts:
        return "NA", "no action on an order was requested or taken", None
    a = min(acts)
    read = next((i for i, n in t.calls if n == "get_order_details" and i < a), None)
    if read is not None:
        return "PRESENT", f"[{read}] read the order before acting at [{a}]", read
    return "LACKING", f"[{a}] acted or answered without checking the order first", a


def confirmation(t: Trajectory) -> Verdict:
    w = t.first_call(WRITE_TOOLS)
    if w is None:
        return "NA", "no write action", None
    asked = [i for i, s in t.texts if i < w and "confirm" in s.lower()]
    if asked and any(asked[-1] < i < w and "yes" in s.lower() for i, s in t.users):
        return "PRESENT", f"[{asked[-1]}] asked for confirmation before the write at [{w}]", asked[-1]
    return "LACKING", f"[{w}] wrote without asking the user to confirm", w


def identity(t: Trajectory) -> Verdict:
    a = t.first_call(ACCOUNT)
    if a is None:
        return "NA", "no account or order was touched", None
    f = next((i for i, n in t.calls if n.startswith("find_customer") and i < a), None)
    if f is not None:
        return "PRESENT", f"[{f}] verified the customer before [{a}]", f
    return "LACKING", f"[{a}] touched an account without verifying the customer", a


def _lookup(name: str) -> str:
    """Calls that answer the same question: the customer lookups by email and by name + zip are one."""
    return "find_customer" if name.startswith("find_customer") else name


def arguments(t: Trajectory) -> Verdict:
    """LACKING when a call was rejected for an argument value and no later call of the same tool was accepted (the
    mistake was never corrected); PRESENT when every call was accepted or every rejected one was corrected."""
    if not t.calls:
        return "NA", "no tool call", None
    results = [(i, _lookup(name), text) for i, name, text in t.tool_results]
    for i, name, text in results:
        if ARG_ERROR.match(text) and not any(j > i and n == name and not s.startswith("Error") for j, n, s in results):
            return "LACKING", f"[{i}] a call was rejected for its arguments and never corrected", i
    fixed = next((i for i, _, text in results if ARG_ERROR.match(text)), None)
    if fixed is not None:
        return "PRESENT", f"[{fixed}] a rejected call was corrected by a later accepted one", fixed
    return "PRESENT", f"[{t.calls[0][0]}] calls were accepted", t.calls[0][0]


ASKS_VALUE = re.compile(r"tracking number|how much|balance|cost|price|total", re.I)
RECORDS = ("get_order_details", "get_customer_details", "get_product_details")
NUMBER = re.compile(r"\d[\d.,]*\d|\d")


def in_scope(t: Trajectory) -> Verdict:
    """Whether a question the agent can answer from its tools (a tracking number, a total, a balance, a price) is
    answered rather than handed to a human agent. NA when the opening asks for no value, or when the agent neither
    transferred nor said a number after reading a record; LACKING when it transferred the customer; PRESENT when it
    answered with a number after reading the record that holds it."""
    if not t.users or not ASKS_VALUE.search(t.users[0][1]):
        return "NA", "the customer asked for no value", None
    transfer = t.first_call((TRANSFER_TOOL,))
    if transfer is not None:
        why = f"[{transfer}] handed the customer to a human agent instead of answering from the tools"
        return "LACKING", why, transfer
    read = next((i for i, name, _ in t.tool_results if name in RECORDS), None)
    said = next((i for i, s in t.texts if read is not None and i > read and NUMBER.search(s)), None)
    if said is None:
        return "NA", "no answer and no transfer", None
    return "PRESENT", f"[{said}] answered from the record read at [{read}]", said


RULES: dict[str, Callable[[Trajectory], Verdict]] = {
    rule.__name__: rule for rule in (precondition, confirmation, identity, arguments, in_scope)
}


def recording_path(env: str, role: str = "analyst") -> Path:
    """Where the recording of `role` (analyst, reflection) for `env` would be: agents/recorded/<name>_<role>.yaml,
    <name> the built-in env's name without its options (`shop?instances=...` -> shop)."""
    return RECORDED_DIR / f"{env.split(':')[0].partition('?')[0]}_{role}.yaml"


def has_recording(env: str) -> bool:
    """Whether gapforge ships a recorded analyst for `env` (llm.kind=scripted without llm.scripted_path needs one)."""
    return recording_path(env).is_file()


def load_recording(env: str) -> list[dict[str, str]]:
    path = recording_path(env)
    if not path.is_file():
        raise AnalysisError(
            f"no recorded analyst for env {env!r}: set llm.kind=openai and an llm.endpoint to analyse it"
        )
    return list(yaml.safe_load(path.read_text())["capabilities"])


def _episodes_text(messages: list[BaseMessage]) -> str:
    """The prompt message that shows the episode(s) (on a re-ask the last message is the error)."""
    return next((str(m.content) for m in reversed(messages) if "### episode" in str(m.content)), "")


def _label_rule(caps: list[dict[str, str]]) -> Callable[[list[BaseMessage], list[dict[str, Any]]], dict[str, Any]]:
    def rule(messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        t = Trajectory(_episodes_text(messages))
        labels = []
        for c in caps:
            label, evidence, idx = RULES[c["rule"]](t)
            labels.append({"capability": c["name"], "label": label, "evidence": evidence, "message_index": idx})
        return {"structured": {"labels": labels}}

    return rule


def _discover_rule(caps: list[dict[str, str]]) -> Callable[[list[BaseMessage], list[dict[str, Any]]], dict[str, Any]]:
    def rule(messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        blocks = re.split(r"^### episode (\d+)$", _episodes_text(messages), flags=re.M)
        episodes = [(int(blocks[i]), Trajectory(blocks[i + 1])) for i in range(1, len(blocks) - 1, 2)]
        out = []
        for c in caps:
            verdicts = [(eid, RULES[c["rule"]](t)[0]) for eid, t in episodes]
            ranked = [e for want in ("LACKING", "PRESENT", None) for e, v in verdicts if want in (v, None)]
            definition = " ".join(c["definition"].split())
            out.append({"name": c["name"], "definition": definition, "example_episode_ids": ranked[:3]})
        return {"structured": {"capabilities": out}}

    return rule


def recorded_analyst(env: str) -> ScriptedChatModel:
    """The scripted analyst for `env` (answers the prompts analyst_discover and analyst_label)."""
    caps = load_recording(env)
    return ScriptedChatModel.from_dict(
        {"analyst_discover": _discover_rule(caps), "analyst_label": _label_rule(caps)},
        source=str(recording_path(env)),
    )
