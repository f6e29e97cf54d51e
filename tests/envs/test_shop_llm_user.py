"""The shop's LLM user simulator, driven by a recording fake chat model (no endpoint)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env
from gapforge.envs.shop.user import STOP


class RecordingChatModel(BaseChatModel):
    """Answers with the given replies in order and records every conversation it was shown."""

    replies: list[str]
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording-fake"

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.replies[len(self.seen) - 1]))])


def test_llm_user_plays_the_task_and_stops_on_the_token() -> None:
    model = RecordingChatModel(
        replies=["My email is in my facts, sorry: ava.garcia29@example.com.", f"Great, thanks! {STOP}"], seen=[]
    )
    env = make_env("shop", user="llm", user_model=model)
    task = env.task("shop-lookup-001")  # type: ignore[attr-defined]
    first = env.reset("shop-lookup-001")
    assert first[1].content == task.user.opening

    r1 = env.step(Message.assistant("Could you share your email address?"))
    assert r1.messages[0].role == "user" and r1.messages[0].content == model.replies[0] and not r1.done
    system, opening, agent = model.seen[0]
    assert isinstance(system, SystemMessage) and isinstance(opening, AIMessage) and isinstance(agent, HumanMessage)
    assert (
        task.user.facts["email"] in str(system.content)
        and STOP in str(system.content)
        and task.goal in str(system.content)
    )
    assert agent.content == "Could you share your email address?"

    for i, action in enumerate(task.gold_actions):
        env.step(Message.assistant(tool_calls=[ToolCall(id=f"c{i}", name=action.name, arguments=action.arguments)]))
    r2 = env.step(Message.assistant(f"Your tracking number is {task.required_info[0]}."))
    assert r2.done and r2.info["termination"] == "user_stop"
    assert len(model.seen) == 2 and len(model.seen[1]) == 5  # system, opening, agent, user reply, agent
    score = env.score()
    assert score.reward == 1.0 and score.info["user"] == "llm" and score.info["user_prompt"] == "shop_user_simulator@1"


def test_llm_user_needs_a_model() -> None:
    with pytest.raises(EnvError, match="needs a user model"):
        make_env("shop", user="llm")


class MeteredChatModel(RecordingChatModel):
    """RecordingChatModel whose answers report their usage, as an OpenAI-compatible endpoint's do."""

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        usage = {"input_tokens": 100 * len(messages), "output_tokens": 7, "total_tokens": 100 * len(messages) + 7}
        reply = AIMessage(self.replies[len(self.seen) - 1], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_the_llm_users_tokens_are_in_the_score_info_and_a_scripted_user_has_none() -> None:
    from gapforge.envs.protocol import user_tokens

    model = MeteredChatModel(replies=["My email is ava.garcia29@example.com.", f"Thanks! {STOP}"], seen=[])
    env = make_env("shop", user="llm", user_model=model)
    env.reset("shop-lookup-001")
    env.step(Message.assistant("Could you share your email address?"))
    env.step(Message.assistant("Anything else?"))
    info = env.score().info
    # two answers: shown 3 and then 5 messages (system, opening, agent[, user, agent])
    assert info["user_tokens"] == [300 + 500, 14]
    scripted = make_env("shop")
    scripted.reset("shop-lookup-001")
    scripted.step(Message.assistant("Could you share your email address?"))
    assert "user_tokens" not in scripted.score().info
    assert user_tokens([info, scripted.score().info, {}]) == (800, 14)
