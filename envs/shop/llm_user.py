"""Optional LLM user simulator for the shop (real runs): any LangChain chat model, passed in.

The prompt is prompts/shop_user_simulator.md (name + version header); the
model plays the customer with the task's goal and facts and ends with the stop
token. Nothing here builds a client: the caller hands over the chat model.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from gapforge.envs.shop.tasks import ShopTask
from gapforge.envs.shop.user import STOP
from gapforge.prompts import load_prompt

PROMPT_FILE = "shop_user_simulator.md"


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)


class LLMUser:
    """A chat model playing the task's customer; same interface as ScriptedUser."""

    def __init__(self, chat_model: BaseChatModel, task: ShopTask) -> None:
        self.model = chat_model
        self.script = task.user
        prompt = load_prompt(PROMPT_FILE)
        self.prompt_name, self.prompt_version, body = prompt.name, prompt.version, prompt.body
        facts = "\n".join(f"- {v}" for v in task.user.facts.values()) or "- (nothing beyond your question)"
        system = body.format(goal=task.goal, opening=task.user.opening, facts=facts, stop=STOP)
        # roles are mirrored: the simulator is the "AI", the shop agent is the "human"
        self.history: list[BaseMessage] = [SystemMessage(system), AIMessage(task.user.opening)]
        self.turns = 0

    @property
    def prompt_id(self) -> str:
        return f"{self.prompt_name}@{self.prompt_version}"

    def opening(self) -> str:
        return self.script.opening

    def reply(self, last: str, said: str, writes_done: int) -> tuple[str, bool]:
        self.turns += 1
        if self.turns > self.script.max_turns:
            return STOP, True
        self.history.append(HumanMessage(last))
        text = _text(self.model.invoke(self.history)).strip()
        self.history.append(AIMessage(text))
        return text, STOP in text
