"""Optional LLM user simulator for the shop (real runs): any LangChain chat model, passed in.

The prompt is prompts/shop_user_simulator.md (name + version header); the
model plays the customer with the task's goal and facts and ends with the stop
token. Nothing here builds a client: the caller hands over the chat model.
"""

from __future__ import annotations

from importlib import resources

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from envs.errors import EnvError
from envs.shop.tasks import ShopTask
from envs.shop.user import STOP

PROMPT_FILE = "shop_user_simulator.md"


def load_prompt(filename: str) -> tuple[str, str, str]:
    """(name, version, body) of a prompts/ file with a `---` name/version header."""
    text = resources.files("prompts").joinpath(filename).read_text(encoding="utf-8")
    head, sep, body = text.partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        raise EnvError(f"prompts/{filename} needs a '---' header with name and version")
    fields = dict(line.split(":", 1) for line in head.removeprefix("---\n").splitlines() if ":" in line)
    name, version = fields.get("name", "").strip(), fields.get("version", "").strip()
    if not name or not version:
        raise EnvError(f"prompts/{filename}: header must set name and version")
    return name, version, body


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
        self.prompt_name, self.prompt_version, body = load_prompt(PROMPT_FILE)
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
