"""parse_tool_calls: Qwen/Hermes completions -> (content, tool calls), malformed blocks raise."""

from __future__ import annotations

import itertools

import pytest

from gapforge.envs.errors import MalformedOutputError
from gapforge.serving.tool_calls import parse_tool_calls


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def test_plain_text_is_content() -> None:
    assert parse_tool_calls("  Your order shipped on Monday.\n") == ("Your order shipped on Monday.", [])


def test_empty_completion_has_no_content() -> None:
    assert parse_tool_calls("") == (None, [])


def test_one_tool_call_with_text_before() -> None:
    text = 'Let me look that up.\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1"}}\n</tool_call>'
    content, calls = parse_tool_calls(text, ids())
    assert content == "Let me look that up."
    assert [(c.id, c.name, c.arguments) for c in calls] == [("call_0", "get_order", {"order_id": "#W1"})]


def test_multiple_tool_calls_keep_order_and_get_distinct_ids() -> None:
    text = (
        '<tool_call>\n{"name": "find_user", "arguments": {"email": "a@b.c"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W2", "verbose": true}}\n</tool_call>'
    )
    content, calls = parse_tool_calls(text)
    assert content is None
    assert [c.name for c in calls] == ["find_user", "get_order"]
    assert calls[1].arguments == {"order_id": "#W2", "verbose": True}
    assert calls[0].id != calls[1].id and all(c.id.startswith("call_") for c in calls)


def test_arguments_encoded_as_string_and_missing_arguments() -> None:
    text = '<tool_call>{"name": "calc", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call><tool_call>{"name": "ping"}</tool_call>'
    _, calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("calc", {"expression": "1+1"}), ("ping", {})]


def test_reasoning_is_dropped_from_content() -> None:
    text = '<think>\nThe user wants a refund; check the order first.\n</think>\n\nChecking.\n<tool_call>{"name": "get_order", "arguments": {}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Checking." and [c.name for c in calls] == ["get_order"]
    # a prompt that opened <think> leaves only the closing tag in the completion
    assert parse_tool_calls("hidden plan</think>Hello!") == ("Hello!", [])


def test_unclosed_final_block_with_valid_json_is_accepted() -> None:
    content, calls = parse_tool_calls('Sure.<tool_call>\n{"name": "get_order", "arguments": {"order_id": "1"}}\n')
    assert content == "Sure." and calls[0].arguments == {"order_id": "1"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('<tool_call>\n{"name": "get_order", "arguments": {"order_id": \n</tool_call>', "not valid JSON"),
        ('<tool_call>{"arguments": {"order_id": "1"}}</tool_call>', "no function name"),
        ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "no function name"),
        ('<tool_call>["get_order"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "get_order", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "get_order", "arguments": "{bad"}</tool_call>', "not valid JSON"),
        (
            '<tool_call>{"name": "get_order", "arguments": {"order_id": "1"',
            "not valid JSON",
        ),  # truncated by max_new_tokens
        ('done {"name": "x"}</tool_call>', "stray"),
        ('<tool_call>{"name": "a"}<tool_call>{"name": "b"}</tool_call>', "not valid JSON"),
    ],
)
def test_malformed_blocks_raise_with_the_raw_text(text: str, reason: str) -> None:
    with pytest.raises(MalformedOutputError) as info:
        parse_tool_calls(text)
    assert reason in str(info.value)
    assert info.value.raw == text
    assert info.value.termination == "malformed_output"


def test_one_bad_block_among_good_ones_fails_the_whole_message() -> None:
    text = '<tool_call>{"name": "ok", "arguments": {}}</tool_call><tool_call>{"name": oops}</tool_call>'
    with pytest.raises(MalformedOutputError):
        parse_tool_calls(text)
