"""`ChatModelPolicy`: envs.protocol.PolicyModel over any LangChain chat model (agents.llm.make_chat_model,
ScriptedChatModel, ...), and the message conversion both ways. Scripted answers for it are keyed by its
`prompt_name` (default "policy"): a shared list and/or per-task scripts under `tasks:` (agents/scripted.py); a
script with neither is refused when the policy is made. `run_episode` (agents/episode.py) is re-exported here.
"""

from __future__ import annotations

from typing import Any

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from gapforge.agents.episode import EpisodeRecord, run_episode
from gapforge.agents.errors import ModelEndpointError, ModelError
from gapforge.agents.llm import is_transient, prompt_config
from gapforge.agents.scripted import TASKS_KEY, ScriptedChatModel
from gapforge.envs.errors import EndpointError, MalformedOutputError, PolicyError
from gapforge.envs.protocol import Message, ToolCall

__all__ = ["ChatModelPolicy", "EpisodeRecord", "from_langchain", "run_episode", "to_langchain"]


def to_langchain(messages: list[Message]) -> list[BaseMessage]:
    """Our OpenAI-format messages -> LangChain messages (tool calls and tool results included)."""
    out: list[BaseMessage] = []
    for m in messages:
        if m.role == "system":
            out.append(SystemMessage(content=m.content or ""))
        elif m.role == "user":
            out.append(HumanMessage(content=m.content or ""))
        elif m.role == "assistant":
            calls = [{"name": tc.name, "args": tc.arguments, "id": tc.id, "type": "tool_call"} for tc in m.tool_calls]
            out.append(AIMessage(content=m.content or "", tool_calls=calls))
        else:
            out.append(ToolMessage(content=m.content or "", tool_call_id=m.tool_call_id or "", name=m.name))
    return out


def from_langchain(ai: BaseMessage, *, call_prefix: str = "call") -> Message:
    """A LangChain assistant message -> our Message; unparseable tool calls -> MalformedOutputError."""
    if not isinstance(ai, AIMessage):
        raise PolicyError(f"the chat model returned a {type(ai).__name__}, expected an assistant message")
    text = ai.text
    if ai.invalid_tool_calls:
        bad = ai.invalid_tool_calls[0]
        raw = "\n".join(filter(None, [text, *(str(tc.get("args") or "") for tc in ai.invalid_tool_calls)]))
        raise MalformedOutputError(
            f"invalid tool call '{bad.get('name')}': {bad.get('error') or 'arguments are not valid JSON'}", raw=raw
        )
    calls = [
        ToolCall(id=tc.get("id") or f"{call_prefix}_{i}", name=tc["name"], arguments=dict(tc["args"]))
        for i, tc in enumerate(ai.tool_calls)
    ]
    return Message.assistant(content=text or (None if calls else ""), tool_calls=calls)


class ChatModelPolicy:
    """envs.protocol.PolicyModel over a LangChain chat model (tools bound per call)."""

    def __init__(self, chat_model: BaseChatModel, name: str, *, prompt_name: str = "policy") -> None:
        if isinstance(chat_model, ScriptedChatModel) and not chat_model.answers_prompt(prompt_name):
            raise ModelError(
                f"scripted policy answers {chat_model.source} hold neither a '{prompt_name}:' list nor '{TASKS_KEY}:' "
                f"scripts (found: {', '.join(sorted(chat_model.answers)) or 'nothing'}): add one (docs/your-agent.md §4)"
            )
        self.chat_model = chat_model
        self.name = name
        self.prompt_name = prompt_name

    def _runnable(self, tools: list[dict[str, Any]], temperature: float | None) -> Any:
        kwargs = {"temperature": temperature} if temperature is not None else {}
        if tools:
            return self.chat_model.bind_tools(tools, **kwargs)
        return self.chat_model.bind(**kwargs) if kwargs else self.chat_model

    async def aclose(self) -> None:
        """Close the chat model's async HTTP client when it has one (make_chat_model gives each model its own)."""
        client = getattr(self.chat_model, "http_async_client", None)
        if client is not None and hasattr(client, "aclose"):
            await client.aclose()

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        runnable = self._runnable(tools, temperature)
        try:
            ai = await runnable.ainvoke(to_langchain(messages), prompt_config(self.prompt_name))
        except ModelEndpointError as e:
            raise EndpointError(str(e)) from e
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
            raise ModelError(
                f"policy '{self.name}': the endpoint refused the request ({e.status_code}): check the API key and model name"
            ) from e
        except openai.APIError as e:
            if is_transient(e):  # a chat model without our retry wrapper
                raise EndpointError(f"policy '{self.name}': {type(e).__name__}: {e}") from e
            raise PolicyError(
                f"policy '{self.name}': the endpoint rejected the request: {type(e).__name__}: {e}"
            ) from e
        return from_langchain(ai, call_prefix=f"call_{len(messages)}")
