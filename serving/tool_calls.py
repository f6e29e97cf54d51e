"""Parse a completion into an assistant message (pure functions).

A Qwen/Hermes-style completion looks like: optional `<think>...</think>` reasoning, free text, then zero or more
`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks. Text outside the tags becomes the message
content. `parse_tool_calls` drops the reasoning; `parse_turn` keeps it in `Message.reasoning`, so re-rendering the
conversation with the training template (serving.chat_format) gives back the tokens the model wrote. Llama 3.1's
format (`parse_turn(..., "llama3_json")`) is one bare JSON object `{"name": ..., "parameters": {...}}` (optionally
after `<|python_tag|>`). A broken call (bad JSON, no name, non-object arguments, stray closing tag) raises
MalformedOutputError carrying the raw text: a bad completion is data, not a crash.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Callable

from gapforge.envs.errors import MalformedOutputError
from gapforge.envs.protocol import Message, ToolCall

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


def _json(body: str, raw: str) -> Any:
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        why = f"tool call is not valid JSON ({e.msg} at char {e.pos}): {body.strip()[:200]!r}"
        raise MalformedOutputError(why, raw=raw) from None


def _parse_block(body: str, raw: str, id_factory: Callable[[], str]) -> ToolCall:
    data = _json(body, raw)
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
            raise MalformedOutputError(
                f"arguments of tool call {name!r} are not valid JSON ({e.msg})", raw=raw
            ) from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise MalformedOutputError(
            f"arguments of tool call {name!r} must be a JSON object, got {type(arguments).__name__}", raw=raw
        )
    return ToolCall(id=id_factory(), name=name.strip(), arguments=arguments)


def parse_tool_calls(text: str, id_factory: Callable[[], str] = new_call_id) -> tuple[str | None, list[ToolCall]]:
    """Split a completion into (content, tool calls): content is the text outside the tags, stripped, or None when
    nothing is left. An unclosed final `<tool_call>` is accepted when its JSON parses (generation may stop right
    after it); otherwise it is malformed."""
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


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, the rest) of a completion that opens with a `<think>...</think>` block (newlines around the
    reasoning and before the rest stripped, as Qwen3's templates render it); (None, text) without one."""
    if "<think>" not in text or "</think>" not in text or not text.lstrip().startswith("<think>"):
        return None, text
    head, rest = text.split("</think>", 1)
    return head.split("<think>", 1)[1].strip("\n"), rest.lstrip("\n")


def _parse_llama_json(text: str, id_factory: Callable[[], str]) -> tuple[str | None, list[ToolCall]]:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return (text.strip() or None), []
    data = _json(body, text)
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
        raise MalformedOutputError(f"tool call has no function name: {body[:200]!r}", raw=text)
    arguments = data.get("parameters", data.get("arguments", {}))
    return None, [_parse_block(json.dumps({"name": data["name"], "arguments": arguments}), text, id_factory)]


def parse_turn(text: str, tool_format: str = "hermes", id_factory: Callable[[], str] = new_call_id) -> Message:
    """A completion as the assistant message it is: content, tool calls and (Hermes format) reasoning."""
    if tool_format == "llama3_json":
        content, calls = _parse_llama_json(text, id_factory)
        return Message.assistant(content=content, tool_calls=calls)
    if tool_format != "hermes":
        raise ValueError(f"unknown tool-call format {tool_format!r}: hermes or llama3_json")
    reasoning, rest = split_reasoning(text)
    content, calls = parse_tool_calls(rest, id_factory)
    return Message(role="assistant", content=content, tool_calls=calls, reasoning=reasoning)
