"""Serving renders and parses with the chat format training uses: the family's training template installed at load,
reasoning kept on the message (and sent back to an endpoint as the <think> block it came as), Llama 3.1's JSON calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapforge.envs.errors import MalformedOutputError
from gapforge.envs.protocol import Message, ToolCall, tool_schema
from gapforge.serving.chat_format import load_tokenizer, qwen3_training_template
from gapforge.serving.local import LocalPolicy, render_prompt
from gapforge.serving.openai_policy import EndpointPolicy, parse_completion
from gapforge.serving.tool_calls import parse_turn

TOOLS = [tool_schema("get_order", "Look up an order by id.", {"order_id": {"type": "string"}})]


def test_a_qwen3_model_is_served_with_the_template_it_is_trained_with(qwen3_model_dir: Path) -> None:
    policy = LocalPolicy(qwen3_model_dir, max_new_tokens=8)
    assert policy.tokenizer.chat_template == qwen3_training_template() == load_tokenizer(qwen3_model_dir).chat_template
    convo = [
        Message.system("s"),
        Message.user("Where is #W1?"),
        Message(role="assistant", content="Which email?", reasoning="Need the account."),
        Message.user("a@b.c"),
    ]
    prompt = policy.render(convo, TOOLS)
    assert (
        "<|im_start|>assistant\n<think>\nNeed the account.\n</think>\n\nWhich email?<|im_end|>" in prompt
    )  # the past turn as sampled
    assert prompt.startswith(
        "<|im_start|>system\ns\n\n# Tools\n\nYou may call one or more functions"
    )  # Qwen3's own tool prompt
    assert prompt == render_prompt(policy.tokenizer, convo, TOOLS)


def test_parse_turn_keeps_the_reasoning_apart_from_content_and_calls() -> None:
    m = parse_turn(
        '<think>\nLook it up.\n</think>\n\nOne moment.\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1"}}\n</tool_call>'
    )
    assert (m.reasoning, m.content, [(c.name, c.arguments) for c in m.tool_calls]) == (
        "Look it up.",
        "One moment.",
        [("get_order", {"order_id": "#W1"})],
    )
    assert parse_turn("Hello.").reasoning is None and parse_turn("Hello.").content == "Hello."


def test_llama3_json_tool_calls() -> None:
    m = parse_turn('{"name": "get_order", "parameters": {"order_id": "#W1"}}', "llama3_json")
    assert m.content is None and [(c.name, c.arguments) for c in m.tool_calls] == [("get_order", {"order_id": "#W1"})]
    assert parse_turn("<|python_tag|>" + '{"name": "x", "parameters": {}}', "llama3_json").tool_calls[0].name == "x"
    assert parse_turn("Your order shipped.", "llama3_json").content == "Your order shipped."
    with pytest.raises(MalformedOutputError, match="not valid JSON"):
        parse_turn('{"name": "get_order", "parameters": {', "llama3_json")


def test_reasoning_goes_to_the_endpoint_as_a_think_block_and_comes_back_apart() -> None:
    policy = EndpointPolicy("http://127.0.0.1:9/v1", "m")
    said = Message(
        role="assistant",
        content=None,
        reasoning="Check first.",
        tool_calls=[ToolCall(id="c", name="get_order", arguments={})],
    )
    wire = json.loads(policy.body_text([Message.user("hi"), said], TOOLS, 1.0))["messages"][1]
    assert (
        wire["content"] == "<think>\nCheck first.\n</think>\n\n"
        and wire["tool_calls"][0]["function"]["name"] == "get_order"
    )
    plain = {"choices": [{"message": {"role": "assistant", "content": "<think>\nR\n</think>\n\nDone."}}]}
    parsed_by_vllm = {"choices": [{"message": {"role": "assistant", "content": "Done.", "reasoning_content": "R"}}]}
    assert (
        parse_completion(plain)
        == parse_completion(parsed_by_vllm)
        == Message(role="assistant", content="Done.", reasoning="R")
    )


def test_a_message_without_reasoning_dumps_as_before() -> None:
    assert (
        "reasoning" not in Message.assistant("x").model_dump()
        and Message(role="assistant", reasoning="r").model_dump()["reasoning"] == "r"
    )
