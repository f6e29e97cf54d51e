"""The shop's simulated users: the deterministic scripted user (keyword rules over the agent's last message), and
the optional LLM user (`LLMUser`, real runs).

The scripted user's rules, first match wins:
1. turn limit reached -> stop;
2. goal reached (enough successful writes, every awaited fact heard, a refusal
   heard when the task expects one) -> thanks + stop;
3. the agent asks for confirmation (and not for an identity fact) -> "yes";
4. the agent asks for facts -> every matching fact, in a fixed order;
5. otherwise -> a fixed nudge.
"""

from __future__ import annotations

from typing import Any

from gapforge.envs.shop.tasks import FactKey, ShopTask, UserScript
from gapforge.envs.simulated_user import simulated_reply

STOP = "###STOP###"
PROMPT_FILE = "shop_user_simulator.md"

_TRIGGERS: list[tuple[FactKey, tuple[str, ...]]] = [
    ("email", ("email", "e-mail")),
    ("name_zip", ("zip", "postal", "your name", "full name", "first name", "last name")),
    ("order_id", ("order id", "order number", "which order", "order #", "order's id", "which of your orders")),
    (
        "items",
        tuple(
            "which item|which product|what item|which of the items|item would you like|items would you like|"
            "which one|what would you like to return|what would you like to exchange".split("|")
        ),
    ),
    ("reason", ("reason", "why")),
    ("address", ("address",)),
    (
        "exchange_target",
        tuple(
            "exchange it for|exchange them for|which variant|what size|what color|which size|which color|"
            "new variant|instead|prefer|would you like it in|replace".split("|")
        ),
    ),
    (
        "payment",
        tuple(
            "payment method|refund to|refunded to|gift card|original payment|which card|price difference|"
            "charge|refund method".split("|")
        ),
    ),
]
_CONFIRM = tuple(
    "confirm|proceed|go ahead|shall i|should i|would you like me to|do you want me to|yes/no|(yes|"
    "is that correct|is this correct|is that right".split("|")
)
_IDENTITY = ("email", "e-mail", "zip", "postal", "your name", "full name")
REFUSAL_WORDS = tuple(
    "cannot|can't|can not|unable|not eligible|ineligible|not possible|not able|not allowed|unfortunately|"
    "not available|unavailable|only pending|only delivered".split("|")
)
THANKS = f"Thank you, that's all I needed. {STOP}"
CONFIRM_YES = "Yes, please go ahead."
NUDGE = "Can you help me with that?"


def normalize(text: str) -> str:
    """Lower-case, without thousands separators or currency signs (for the communicate check)."""
    return text.lower().replace(",", "").replace("$", "")


class ScriptedUser:
    """One episode's scripted user. `reply` is a pure function of its inputs and the turn count."""

    def __init__(self, script: UserScript, awaited_info: list[str]) -> None:
        self.script = script
        self.awaited = [normalize(s) for s in awaited_info]
        self.turns = 0

    def opening(self) -> str:
        return self.script.opening

    def satisfied(self, said: str, writes_done: int) -> bool:
        heard = normalize(said)
        if writes_done < self.script.expected_writes:
            return False
        if not all(info in heard for info in self.awaited):
            return False
        return not self.script.needs_refusal or any(w in heard for w in REFUSAL_WORDS)

    def reply(self, last: str, said: str, writes_done: int) -> tuple[str, bool]:
        """The user's answer to the agent's last text message; `said` is all agent text so far."""
        self.turns += 1
        if self.turns > self.script.max_turns:
            return STOP, True
        if self.satisfied(said, writes_done):
            return THANKS, True
        text = last.lower()
        if any(c in text for c in _CONFIRM) and not any(i in text for i in _IDENTITY):
            return CONFIRM_YES, False
        parts: list[str] = []
        facts = self.script.facts
        for key, triggers in _TRIGGERS:
            scan = text.replace("email address", "").replace("e-mail address", "") if key == "address" else text
            if not any(t in scan for t in triggers):
                continue
            if key in facts:
                if facts[key] not in parts:
                    parts.append(facts[key])
            elif key == "email":
                parts.append("I don't remember my email address.")
                if "name_zip" in facts and facts["name_zip"] not in parts:
                    parts.append(facts["name_zip"])
        return (" ".join(parts) if parts else NUDGE), False


class LLMUser:
    """Optional LLM user simulator (real runs): any LangChain chat model, passed in, playing the task's customer with
    prompts/shop_user_simulator.md; it ends with the stop token. Same interface as ScriptedUser."""

    def __init__(self, chat_model: Any, task: ShopTask) -> None:
        from langchain_core.messages import AIMessage, SystemMessage

        from gapforge.prompts import load_prompt

        self.model = chat_model
        self.script = task.user
        prompt = load_prompt(PROMPT_FILE)
        self.prompt_name, self.prompt_version, body = prompt.name, prompt.version, prompt.body
        facts = "\n".join(f"- {v}" for v in task.user.facts.values()) or "- (nothing beyond your question)"
        system = body.format(goal=task.goal, opening=task.user.opening, facts=facts, stop=STOP)
        # roles are mirrored: the simulator is the "AI", the shop agent is the "human"
        self.history: list[Any] = [SystemMessage(system), AIMessage(task.user.opening)]
        self.turns = 0
        self.tokens = [0, 0]  # prompt, completion: the endpoint's reported usage (score info `user_tokens`)

    @property
    def prompt_id(self) -> str:
        return f"{self.prompt_name}@{self.prompt_version}"

    def opening(self) -> str:
        return self.script.opening

    def reply(self, last: str, said: str, writes_done: int) -> tuple[str, bool]:
        self.turns += 1
        if self.turns > self.script.max_turns:
            return STOP, True
        text = simulated_reply(self.model, self.history, self.tokens, last)
        return text, STOP in text
