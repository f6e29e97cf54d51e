"""Reusable conformance suite for the Environment protocol (envs/protocol.py).

Not a test module: test files call `check_conformance(factory, task_ids)` with a
factory that builds a *fresh* environment each call. Every check asserts an
outcome of the reset/step/score contract, so any environment (the built-in
shop, the τ²-bench adapter, a sandboxed synthetic env) is held to the same bar.

    from tests.envs.conformance import check_conformance
    check_conformance(lambda: make_env("shop"), ["shop-lookup-001"])
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Environment, Message, Score, StepResult, ToolCall
from gapforge.sandbox.checks.schemas import schema_problems

UNKNOWN_TASK = "__no_such_task__"

EnvFactory = Callable[[], Environment]


def check_tool_schemas(tools: list[dict[str, Any]]) -> None:
    """Each tool is a valid OpenAI function schema (the validator's own rules), with a description,
    serialisable for the wire; names are unique."""
    problems = schema_problems(tools)
    assert not problems, "invalid tool schemas: " + "; ".join(problems)
    for tool in tools:
        fn = tool["function"]
        assert isinstance(fn.get("description"), str) and fn["description"].strip(), (
            f"tool {fn['name']} needs a description"
        )
        json.dumps(tool)  # must be serialisable for the wire


def check_reset(env: Environment, task_id: str) -> list[Message]:
    """reset returns [system, user, ...] messages."""
    messages = env.reset(task_id)
    assert isinstance(messages, list) and len(messages) >= 2, "reset must return at least [system, user]"
    assert all(isinstance(m, Message) for m in messages), "reset must return envs.protocol.Message objects"
    assert messages[0].role == "system" and (messages[0].content or "").strip(), (
        "first message must be a non-empty system prompt"
    )
    assert any(m.role == "user" and (m.content or "").strip() for m in messages[1:]), (
        "reset must include a first user turn"
    )
    return messages


def check_reset_deterministic(make_env: EnvFactory, task_id: str) -> None:
    """Two fresh environments, same task -> identical initial messages and tools."""
    a, b = make_env(), make_env()
    try:
        ma = [m.model_dump() for m in a.reset(task_id)]
        mb = [m.model_dump() for m in b.reset(task_id)]
        assert ma == mb, f"reset({task_id!r}) is not deterministic"
        assert a.tools() == b.tools(), "tools() differ between two fresh instances"
    finally:
        a.close()
        b.close()


def check_tool_step(env: Environment, task_id: str) -> None:
    """A tool call (even a bad one) yields tool messages whose tool_call_id matches; never raises."""
    env.reset(task_id)
    first = env.tools()[0]["function"]["name"]
    calls = [
        ToolCall(id="conf_call_1", name=first, arguments={}),
        ToolCall(id="conf_call_2", name="__no_such_tool__", arguments={"x": 1}),
    ]
    result = env.step(Message.assistant(tool_calls=calls))
    assert isinstance(result, StepResult)
    tool_msgs = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == ["conf_call_1", "conf_call_2"], (
        "one tool message per call, in order, ids matching"
    )
    assert all(isinstance(m.content, str) for m in tool_msgs), "tool results must be strings"


def check_text_step(env: Environment, task_id: str) -> None:
    """A text turn yields the user's reply or ends the episode."""
    env.reset(task_id)
    result = env.step(Message.assistant("Hello! How can I help you today?"))
    assert isinstance(result, StepResult)
    assert result.done or any(m.role == "user" for m in result.messages), "text step must return a user message or done"
    assert all(m.role != "assistant" for m in result.messages), "the environment never speaks as the assistant"


def check_score(env: Environment, task_id: str) -> Score:
    env.reset(task_id)
    env.step(Message.assistant("Hello! How can I help you today?"))
    score = env.score()
    assert isinstance(score, Score)
    assert 0.0 <= score.reward <= 1.0
    assert isinstance(score.success, bool)
    for name, value in score.components.items():
        assert 0.0 <= value <= 1.0, f"component {name}={value} out of [0, 1]"
    return score


def check_unknown_task(env: Environment) -> None:
    with pytest.raises(EnvError) as err:
        env.reset(UNKNOWN_TASK)
    assert UNKNOWN_TASK in str(err.value), "the error must name the unknown task"
    assert "\n" not in str(err.value).strip(), "the error must be one line"


def check_conformance(make_env: EnvFactory, task_ids: list[str]) -> None:
    """Run every check on fresh environments from `make_env` for each task id."""
    assert task_ids, "give at least one task id"
    env = make_env()
    try:
        assert isinstance(env, Environment), "must implement envs.protocol.Environment"
        assert isinstance(env.name, str) and env.name
        check_tool_schemas(env.tools())
        check_unknown_task(env)
    finally:
        env.close()
    for task_id in task_ids:
        check_reset_deterministic(make_env, task_id)
        env = make_env()
        try:
            check_reset(env, task_id)
            check_tool_step(env, task_id)
            check_text_step(env, task_id)
            check_score(env, task_id)
        finally:
            env.close()
