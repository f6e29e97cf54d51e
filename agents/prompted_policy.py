"""The base policy with a text added to its system message, for evaluation's baselines (no adapter, no router):
`PromptedPolicy` (the GEPA baseline plays its candidates and optimised prompt through it: evaluation/gepa_baseline.py)
and `HintedPolicy` (`capability_hints`: the capability descriptions, prompts/capability_hints.md, unoptimised).
"""

from __future__ import annotations

from typing import Any

from gapforge.envs.protocol import Message, PolicyModel
from gapforge.prompts import load_prompt


def hints_text(capabilities: list[dict[str, str]]) -> tuple[str, str]:
    """The system-prompt addition listing capabilities, and the prompt id (name@version) it came from."""
    prompt = load_prompt("capability_hints.md")
    lines = "\n".join(f"- {c['name']}: {c['definition'].strip()}" for c in capabilities)
    return prompt.body.format(capabilities=lines), prompt.id


class PromptedPolicy:
    """The base policy with `addition` appended to the env's system message (the env's own text stays first: it is
    the target's policy, not the agent's prompt); no adapter. `prompt_id` names where the addition came from."""

    def __init__(self, base: PolicyModel, addition: str, *, name: str, prompt_id: str | None = None) -> None:
        self.base = base
        self.name = name
        self.addition = addition
        self.prompt_id = prompt_id

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        out = list(messages)
        if out and out[0].role == "system":
            out[0] = Message.system((out[0].content or "") + self.addition)
        else:
            out.insert(0, Message.system(self.addition.strip()))
        return await self.base.respond(out, tools, temperature=temperature)


class HintedPolicy(PromptedPolicy):
    def __init__(
        self, base: PolicyModel, capabilities: list[dict[str, str]], *, name: str = "capability_hints"
    ) -> None:
        hints, prompt_id = hints_text(capabilities)
        super().__init__(base, hints, name=name, prompt_id=prompt_id)
        self.hints = hints
