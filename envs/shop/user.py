"""The deterministic scripted user: keyword rules over the agent's last message.

Order of rules, first match wins:
1. turn limit reached -> stop;
2. goal reached (enough successful writes, every awaited fact heard, a refusal
   heard when the task expects one) -> thanks + stop;
3. the agent asks for confirmation (and not for an identity fact) -> "yes";
4. the agent asks for facts -> every matching fact, in a fixed order;
5. otherwise -> a fixed nudge.
"""

from __future__ import annotations

from gapforge.envs.shop.tasks import FactKey, UserScript

STOP = "###STOP###"

_TRIGGERS: list[tuple[FactKey, tuple[str, ...]]] = [
    ("email", ("email", "e-mail")),
    ("name_zip", ("zip", "postal", "your name", "full name", "first name", "last name")),
    ("order_id", ("order id", "order number", "which order", "order #", "order's id", "which of your orders")),
    (
        "items",
        (
            "which item",
            "which product",
            "what item",
            "which of the items",
            "item would you like",
            "items would you like",
            "which one",
            "what would you like to return",
            "what would you like to exchange",
        ),
    ),
    ("reason", ("reason", "why")),
    ("address", ("address",)),
    (
        "exchange_target",
        (
            "exchange it for",
            "exchange them for",
            "which variant",
            "what size",
            "what color",
            "which size",
            "which color",
            "new variant",
            "instead",
            "prefer",
            "would you like it in",
            "replace",
        ),
    ),
    (
        "payment",
        (
            "payment method",
            "refund to",
            "refunded to",
            "gift card",
            "original payment",
            "which card",
            "price difference",
            "charge",
            "refund method",
        ),
    ),
]
_CONFIRM = (
    "confirm",
    "proceed",
    "go ahead",
    "shall i",
    "should i",
    "would you like me to",
    "do you want me to",
    "yes/no",
    "(yes",
    "is that correct",
    "is this correct",
    "is that right",
)
_IDENTITY = ("email", "e-mail", "zip", "postal", "your name", "full name")
REFUSAL_WORDS = (
    "cannot",
    "can't",
    "can not",
    "unable",
    "not eligible",
    "ineligible",
    "not possible",
    "not able",
    "not allowed",
    "unfortunately",
    "not available",
    "unavailable",
    "only pending",
    "only delivered",
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
