"""The OpenAI chat-completions wire format as the routed endpoint reads and answers it: the request fields it
accepts (`ChatRequest`, unknown ones refused), wire messages -> `Message` (`to_message`, a `BadRequest` naming the
part of the wrong shape), the conversation key routing caches by, and OpenAI-style error bodies (`error`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gapforge.envs.protocol import Message, ToolCall
from gapforge.faults import InputFault, first_problem


class BadRequest(InputFault, ValueError):
    """A request of the wrong shape; the message says which part (400)."""


class ChatRequest(BaseModel):
    """The chat-completions fields we accept; anything else is refused with a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: Literal[False] | None = None
    n: Literal[1] | None = None
    seed: int | None = None
    top_p: float | None = None
    stop: Any = None
    user: str | None = None
    metadata: dict[str, Any] | None = None


def _tool_call(where: str, tc: Any, i: int) -> ToolCall:
    fn = tc.get("function") if isinstance(tc, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise BadRequest(
            f"{where}.tool_calls.{i}: expected {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}"
        )
    args = fn.get("arguments") or "{}"
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            raise BadRequest(f"{where}.tool_calls.{i}.function.arguments is not JSON") from None
    if not isinstance(args, dict):
        raise BadRequest(f"{where}.tool_calls.{i}.function.arguments must be a JSON object")
    return ToolCall(id=str(tc.get("id") or f"call_{i}"), name=fn["name"], arguments=args)


def to_message(d: Any, where: str = "message") -> Message:
    """An OpenAI wire message -> Message (tool-call arguments parsed from their JSON string); BadRequest
    naming the part when it has the wrong shape."""
    if not isinstance(d, dict) or "role" not in d:
        raise BadRequest(f"{where}: expected an object with a 'role'")
    content = d.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    raw_calls = d.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list")
    calls = [_tool_call(where, tc, i) for i, tc in enumerate(raw_calls)]
    try:
        return Message(
            role=d["role"], content=content, tool_calls=calls, tool_call_id=d.get("tool_call_id"), name=d.get("name")
        )
    except ValidationError as e:
        raise BadRequest(f"{where}.{first_problem(e)}") from None


def conversation_key(messages: list[dict[str, Any]]) -> str:
    """sha256 of the messages up to and including the first user turn: the same conversation, the same key."""
    head = []
    for m in messages:
        head.append({"role": m.get("role"), "content": m.get("content")})
        if m.get("role") == "user":
            break
    return hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()[:32]


def error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}, status=status, headers=headers
    )
