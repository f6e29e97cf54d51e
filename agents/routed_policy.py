"""Policies built from the router and from capability descriptions, for evaluation.

- `RoutedPolicy` (TRACE): routes each episode ONCE on its first user message
  (decisions cached by that message) and lets the chosen adapter's policy answer
  every turn; None / abstain -> the base policy. `decisions` records what was
  chosen per first message, so evaluation can store the routing per task.
- `PromptedPolicy`: the base policy with a text appended to the env's system
  message, no adapter (the GEPA baseline plays its candidates and its optimised
  prompt through it: evaluation/gepa_baseline.py).
- `HintedPolicy` (`capability_hints`): a `PromptedPolicy` whose text is the
  capability descriptions (prompts/capability_hints.md), unoptimised.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gapforge.agents.router import RouteDecision, Router, first_user_message
from gapforge.envs.protocol import Message, PolicyModel
from gapforge.prompts import load_prompt


class RoutedPolicy:
    def __init__(
        self, router: Router, base: PolicyModel, adapters: dict[str, PolicyModel], *, name: str = "trace_routed"
    ) -> None:
        self.router = router
        self.base = base
        self.adapters = adapters
        self.name = name
        self.decisions: dict[str, RouteDecision] = {}  # first user message -> decision (routing is deterministic)

    async def decide(self, messages: list[Message]) -> RouteDecision | None:
        first = first_user_message(messages)
        if first is None:
            return None
        if first not in self.decisions:
            self.decisions[first] = await asyncio.to_thread(self.router.route, first)
        return self.decisions[first]

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        decision = await self.decide(messages)
        adapter = decision.adapter if decision is not None else None
        policy = self.adapters.get(adapter, self.base) if adapter else self.base
        return await policy.respond(messages, tools, temperature=temperature)


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
