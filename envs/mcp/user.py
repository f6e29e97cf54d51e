"""The simulated user of an MCP target's task: scripted (from the task's facts) or an LLM playing a persona.

Scripted: an assistant text turn is answered with every fact whose name appears in it, one `name: value` line each;
a turn naming no fact ends the conversation ("Thank you, that's all I needed."), as does the `max_turns`-th answer.
A name may list alternatives joined by `|` (`badge|last four`), matched case-insensitively as whole words with `_`,
`-` and whitespace alike (`employee_id` matches "employee ID"); a confirmation is a fact too: `{"confirm|go ahead": "yes"}`.
LLM: any LangChain chat model, prompt `prompts/mcp_user_simulator.md` with the task's persona (default "the person
who wrote the opening message") and facts; it ends with `###STOP###`.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from gapforge.envs.mcp.spec import TaskSpec
from gapforge.envs.simulated_user import simulated_reply

STOP = "###STOP###"
THANKS = "Thank you, that's all I needed."
PROMPT_FILE = "mcp_user_simulator.md"


class SimulatedUser(Protocol):
    def opening(self) -> str: ...

    def reply(self, text: str) -> tuple[str, bool]:
        """The user's answer to the assistant's text turn, and whether the conversation ends with it."""
        ...


def _norm(text: str) -> str:
    return " " + re.sub(r"[\s_\-]+", " ", text.lower()) + " "


def names_fact(text: str, name: str) -> bool:
    """Whether `text` names the fact `name` (any of its |-alternatives, as whole words)."""
    hay = _norm(text)
    return any(
        re.search(r"(?<!\w)" + re.escape(_norm(alt).strip()) + r"(?!\w)", hay) for alt in name.split("|") if alt.strip()
    )


class ScriptedUser:
    def __init__(self, task: TaskSpec) -> None:
        self.task = task
        self.turns = 0

    def opening(self) -> str:
        return self.task.opening

    def reply(self, text: str) -> tuple[str, bool]:
        self.turns += 1
        asked = [(name, value) for name, value in self.task.user.facts.items() if names_fact(text, name)]
        if not asked:
            return THANKS, True
        answer = "\n".join(f"{name.split('|')[0].strip()}: {value}" for name, value in asked)
        return answer, self.turns >= self.task.user.max_turns


class LLMUser:
    """A chat model playing the task's user; roles are mirrored (the simulator is the AI, the agent the human)."""

    def __init__(self, chat_model: Any, task: TaskSpec) -> None:
        from langchain_core.messages import AIMessage, SystemMessage

        from gapforge.prompts import load_prompt

        prompt = load_prompt(PROMPT_FILE)
        self.prompt_id = prompt.id
        self.model, self.task, self.turns = chat_model, task, 0
        persona = task.user.llm.persona if task.user.llm else "the person who wrote the opening message"
        facts = "\n".join(f"- {name.split('|')[0].strip()}: {value}" for name, value in task.user.facts.items())
        system = prompt.body.format(
            persona=persona, opening=task.opening, facts=facts or "- (nothing beyond your request)", stop=STOP
        )
        self.history: list[Any] = [SystemMessage(system), AIMessage(task.opening)]
        self.tokens = [0, 0]  # prompt, completion: the endpoint's reported usage (score info `user_tokens`)

    def opening(self) -> str:
        return self.task.opening

    def reply(self, text: str) -> tuple[str, bool]:
        self.turns += 1
        said = simulated_reply(self.model, self.history, self.tokens, text)
        return said, STOP in said or self.turns >= self.task.user.max_turns
