"""`RoutedPolicy` (TRACE): routes each episode ONCE on its first user message (decisions cached by that message) and
lets the chosen adapter's policy answer every turn; None / abstain -> the base policy. `decisions` records what was
chosen per first message, so evaluation can store the routing per task."""

from __future__ import annotations

import asyncio
from typing import Any

from gapforge.agents.router.router import RouteDecision, Router, first_user_message
from gapforge.envs.protocol import Message, PolicyModel


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
