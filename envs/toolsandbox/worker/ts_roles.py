"""Roles that plug into ToolSandbox's own play loop (ToolSandbox venv only: the standard library and `tool_sandbox`).

`BridgeAgent` subclasses ToolSandbox's `OpenAIAPIAgent` and replaces only the model call (`model_inference`): the
model is gapforge's policy on the other side of the worker protocol (a thread hand-off, ts_episode.py). The LLM user
subclasses its `OpenAIAPIUser` and replaces only the client, so prompts, few-shot examples and `end_conversation`
stay ToolSandbox's. `ScriptedUser`: its replies in order, then `end_conversation`, as the LLM user would.
`EndpointUser`: ToolSandbox's LLM user on any endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall, Function
from tool_sandbox.common.execution_context import RoleType
from tool_sandbox.common.message_conversion import Message, openai_tool_call_to_python_code
from tool_sandbox.roles.base_role import BaseRole
from tool_sandbox.roles.openai_api_agent import OpenAIAPIAgent
from tool_sandbox.roles.openai_api_user import OpenAIAPIUser


def completion(message: dict[str, Any]) -> ChatCompletion:
    """An OpenAI-format assistant message dict -> the ChatCompletion an OpenAI client would return."""
    calls = [
        ChatCompletionMessageToolCall(
            id=c["id"],
            type="function",
            function=Function(name=c["function"]["name"], arguments=c["function"].get("arguments") or "{}"),
        )
        for c in message.get("tool_calls") or []
    ]
    msg = ChatCompletionMessage(role="assistant", content=message.get("content"), tool_calls=calls or None)
    return ChatCompletion(
        id="gapforge",
        object="chat.completion",
        created=int(time.time()),
        model="gapforge-bridge",
        choices=[Choice(index=0, finish_reason="tool_calls" if calls else "stop", message=msg)],
    )


class BridgeAgent(OpenAIAPIAgent):
    """ToolSandbox's OpenAI agent whose model is `ask(messages, tools) -> assistant message dict`."""

    model_name = "gapforge-policy"

    def __init__(self, ask: Callable[[list[dict[str, Any]], Any], dict[str, Any]]) -> None:  # no OpenAI client
        self.ask = ask

    def model_inference(self, openai_messages: Any, openai_tools: Any) -> ChatCompletion:
        tools = openai_tools if isinstance(openai_tools, list) else None
        return completion(self.ask(list(openai_messages), tools))


class ScriptedUser(BaseRole):
    """Offline user: its replies to the agent's text turns in order, then `end_conversation`.

    It does not read what the agent says (so it cannot measure a real policy's
    dialogue skills); with no replies it ends the conversation at the agent's first
    text turn (the agent's final answer).
    """

    role_type = RoleType.USER

    def __init__(self, replies: list[str] | None = None) -> None:
        self.replies = list(replies or [])
        self.turn = 0

    def respond(self, ending_index: int | None = None) -> None:
        messages = self.filter_messages(self.get_messages(ending_index=ending_index))
        if not messages or messages[-1].sender == RoleType.SYSTEM:
            return
        if self.turn < len(self.replies):
            self.add_messages(
                [Message(sender=self.role_type, recipient=RoleType.AGENT, content=self.replies[self.turn])]
            )
            self.turn += 1
            return
        tools = self.get_available_tools()
        call = ChatCompletionMessageToolCall(
            id="call_user_end", type="function", function=Function(name="end_conversation", arguments="{}")
        )
        code = openai_tool_call_to_python_code(call, set(tools), execution_facing_tool_name=None)
        self.add_messages([Message(sender=self.role_type, recipient=RoleType.EXECUTION_ENVIRONMENT, content=code)])


class EndpointUser(OpenAIAPIUser):
    """ToolSandbox's own LLM user simulator, pointed at a configured OpenAI-compatible endpoint."""

    def __init__(self, model: str, base_url: str | None, api_key: str, timeout_s: float, max_retries: int) -> None:
        self.model_name = model
        self.openai_client = OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=max_retries
        )
