"""The LLM roles that can answer from recorded answers, as data for docs/recordings.md (gapforge/recordings_reference.py
renders them): the prompt each answers, where its file is read from, the pydantic model that validates its answer, a
minimal answer and a minimal file holding it (tests/gapforge/test_recordings_docs.py loads every one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gapforge.agents.analysis.schemas import CapabilityDictionary, EpisodeLabels
from gapforge.agents.scripted import TASKS_KEY, ScriptedAnswer, ScriptedChatModel
from gapforge.agents.synthesis.generator import GeneratedEnv
from gapforge.agents.synthesis.reviewer import ReviewVerdict
from gapforge.prompts import load_prompt

POLICY_PROMPT = ScriptedChatModel.model_fields["task_prompt"].default


@dataclass(frozen=True)
class Role:
    """One LLM role's recorded form: where its answers come from and what one looks like."""

    title: str
    prompt: str
    read_from: str
    schema: type[BaseModel] | None  # None: a plain-text answer
    example: Any  # one answer, as the role's model validates it
    file_example: dict[str, Any]  # a minimal file holding it
    notes: list[str] = field(default_factory=list)


def _structured(answer: dict[str, Any]) -> dict[str, Any]:
    return {"structured": answer}


DISCOVERY = {
    "capabilities": [
        {
            "name": "invoice_lookup",
            "definition": "Reads the invoice with get_invoice before stating an amount.",
            "example_episode_ids": [3],
        }
    ]
}
LABELS = {
    "labels": [
        {
            "capability": "invoice_lookup",
            "label": "LACKING",
            "evidence": "[2] stated an amount without get_invoice",
            "message_index": 2,
        }
    ]
}
GENERATED = {
    "code_file": "billing/invoice_lookup_1.py",
    "notes": "Invoices with random amounts; reward for the lookup before the answer.",
}
VERDICT = {
    "verdict": "accept",
    "capability_focus": True,
    "tools_match": True,
    "reward_gameable": False,
    "problems": [],
    "fixes": [],
}
REFUND = [{"tool_calls": [{"name": "refund_invoice", "arguments": {"invoice_id": "INV-7"}}]}, "Refunded INV-7."]
REFLECTION = "```\nYou are Acme billing support.\n- Call get_invoice before you state an amount.\n```"

ROLES = [
    Role(
        "Scripted policy",
        POLICY_PROMPT,
        "`policy.scripted_path` with `policy.kind: scripted`, or `--policy scripted:FILE` on `rollouts collect`",
        ScriptedAnswer,
        REFUND[0],
        {TASKS_KEY: {"refund-001": REFUND}, POLICY_PROMPT: {"repeat": "Sorry, I cannot help with that."}},
        [
            f"`{POLICY_PROMPT}:` is one list shared by every episode, consumed in the order the calls arrive: with "
            "`rollouts.concurrency` above 1 that is whichever episode asks first; `rollouts.concurrency=1` makes it the order "
            "of the tasks, each task's samples in turn. `{repeat: ANSWER}` answers every call the same.",
            f"`{TASKS_KEY}:` maps a task id to its own list (or `{{repeat: ANSWER}}`): every episode of that task starts at the head "
            "of the list, so sample k replays the same script; the n-th policy call of an episode gets the n-th answer. A task "
            f"not listed takes the shared `{POLICY_PROMPT}:` list. A file with neither key is refused before any episode (exit 2).",
            "A plain string is a text answer; a mapping may hold text and tool calls together. Arguments given as a string are "
            "sent as raw JSON, so a malformed tool call can be scripted on purpose.",
        ],
    ),
    Role(
        "Analyst: discovery",
        load_prompt("analyst_discover.md").name,
        "`llm.scripted_path` with `llm.kind: scripted`; with no path, a `shop` run uses the built-in recorded analyst "
        "(`agents/recorded/shop_analyst.yaml`: a dictionary plus rules over each trajectory, not this format)",
        CapabilityDictionary,
        DISCOVERY,
        {load_prompt("analyst_discover.md").name: [_structured(DISCOVERY)]},
        [
            "Checked beyond types: between `analysis.min_capabilities` and `analysis.max_capabilities` capabilities, unique "
            "snake_case names, non-empty definitions, at least one example id each, and every example id one of the episodes "
            "the prompt showed (the store's episode ids: `gapforge rollouts show RUN`; the sample is fixed by `analysis.seed`).",
            "One call per run: a stored discovery is reused, so the file is read once.",
        ],
    ),
    Role(
        "Analyst: labeling",
        load_prompt("analyst_label.md").name,
        "the same file as discovery",
        EpisodeLabels,
        LABELS,
        {load_prompt("analyst_label.md").name: [_structured(LABELS)]},
        [
            "One call per (episode, pass) of the analysis split; a list is consumed in call order (`analysis.concurrency=1`: "
            "episode order within each pass). `{repeat: ANSWER}` labels every episode alike.",
            "Checked beyond types: every capability of the dictionary exactly once, no other name, a `message_index` for every "
            "label but NA, within the episode's messages. An answer that fails is re-asked once (the re-ask takes the next "
            "answer), then stored as a labeling failure that `gapforge analyze` prints with its error.",
        ],
    ),
    Role(
        "GEPA reflection",
        "gepa_reflection",
        "the `llm.scripted_path` file, only when `evaluation.comparisons` lists gepa; with no path, `agents/recorded/<env>_reflection.yaml` "
        "for a built-in env",
        None,
        REFLECTION,
        {"gepa_reflection": {"repeat": REFLECTION}},
        ["Plain text: the new system-prompt instructions inside one ``` block."],
    ),
    Role(
        "Generator",
        load_prompt("synthesis_generator.md").name,
        "`synthesis.recordings` (default: the demo's `gapforge/demo_data/recordings/shop.yaml`) whenever `llm.kind: scripted`; "
        "`llm.scripted_path` is not read for this role",
        GeneratedEnv,
        GENERATED,
        {load_prompt("synthesis_generator.md").name: {"invoice_lookup": [GENERATED]}},
        [
            "Keyed by prompt, then capability, then one answer per attempt: attempt N takes the N-th entry, attempts past the "
            "list the last one (the attempt is read from the prompt, so a resumed run gets its attempt's answer).",
            "The answer's fields sit directly under the capability (no `structured:`); `code_file: PATH` (relative to the "
            "recordings file) stands for `code` and is read when the file loads.",
            "Every recorded module still goes through the static gate, the sandbox self-test and the repair loop.",
        ],
    ),
    Role(
        "Reviewer",
        load_prompt("synthesis_reviewer.md").name,
        "the same `synthesis.recordings` file as the generator",
        ReviewVerdict,
        VERDICT,
        {load_prompt("synthesis_reviewer.md").name: {"invoice_lookup": [VERDICT]}},
        [
            "Asked for every attempt that passes the static gate, after its self-test (`synthesis.review`). Its check "
            "`llm_review` passes only when `verdict` is accept, `capability_focus` and `tools_match` are true and "
            "`reward_gameable` is false; `problems` and `fixes` go into the next attempt's prompt."
        ],
    ),
]
