"""Parse a Qwen/Hermes-style completion into content and tool calls (pure functions).

A completion looks like: optional `<think>...</think>` reasoning, free text, then
zero or more `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks.
Text outside the tags becomes the message content; reasoning is dropped (the chat
format has no field for it and Qwen3 templates strip it from history anyway). A
broken block (bad JSON, no name, non-object arguments, stray closing tag) raises
MalformedOutputError carrying the raw text: a bad completion is data, not a crash.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Callable

from envs.errors import MalformedOutputError
from envs.protocol import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def strip_reasoning(text: str) -> str:
    """Drop `<think>` blocks; an unclosed one runs to the end, a lone `</think>` ends reasoning
    that the prompt opened."""
    text = _THINK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text


def _parse_block(body: str, raw: str, id_factory: Callable[[], str]) -> ToolCall:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise MalformedOutputError(f"tool call is not valid JSON ({e.msg} at char {e.pos}): {body.strip()[:200]!r}", raw=raw) from None
    if not isinstance(data, dict):
        raise MalformedOutputError(f"tool call must be a JSON object, got {type(data).__name__}", raw=raw)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise MalformedOutputError(f"tool call has no function name: {body.strip()[:200]!r}", raw=raw)
    arguments: Any = data.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            raise MalformedOutputError(f"arguments of tool call {name!r} are not valid JSON ({e.msg})", raw=raw) from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise MalformedOutputError(f"arguments of tool call {name!r} must be a JSON object, got {type(arguments).__name__}", raw=raw)
    return ToolCall(id=id_factory(), name=name.strip(), arguments=arguments)


def parse_tool_calls(text: str, id_factory: Callable[[], str] = new_call_id) -> tuple[str | None, list[ToolCall]]:
    """Split a completion into (content, tool calls).

    content is the text outside the tags, stripped, or None when nothing is left.
    An unclosed final `<tool_call>` is accepted when its JSON parses (generation
    may stop right after it); otherwise it is malformed.
    """
    visible = strip_reasoning(text)
    calls: list[ToolCall] = []
    pieces: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(visible):
        pieces.append(visible[pos : match.start()])
        calls.append(_parse_block(match.group(1), text, id_factory))
        pos = match.end()
    rest = visible[pos:]
    if OPEN in rest:
        before, body = rest.split(OPEN, 1)
        pieces.append(before)
        calls.append(_parse_block(body, text, id_factory))
        rest = ""
    pieces.append(rest)
    content = "".join(pieces)
    if CLOSE in content:
        raise MalformedOutputError(f"stray {CLOSE} without a matching {OPEN}", raw=text)
    content = content.strip()
    return (content or None), calls
