"""One turn of a chat model playing the task's user (the shop's and the MCP target's LLM users); LangChain is
imported here, never by the episode loop's modules."""

from __future__ import annotations

from typing import Any

from gapforge.envs.protocol import add_usage


def simulated_reply(chat_model: Any, history: list[Any], tokens: list[int], text: str) -> str:
    """One turn of a chat model playing the user, roles mirrored (the agent's `text` is the human turn, the user's
    answer the AI's): the answer's text, stripped; both turns appended to `history`, its usage added to `tokens`."""
    from langchain_core.messages import AIMessage, HumanMessage

    history.append(HumanMessage(text))
    answer = chat_model.invoke(history)
    add_usage(tokens, answer)
    content = answer.content
    if not isinstance(content, str):
        content = "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)
    said = content.strip()
    history.append(AIMessage(said))
    return said
