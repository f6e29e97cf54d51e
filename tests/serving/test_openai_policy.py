"""EndpointPolicy against the local fake OpenAI server: answers, retries, errors, event-loop reuse."""

from __future__ import annotations

import asyncio

import pytest

from gapforge.envs.errors import EndpointError, MalformedOutputError, PolicyError
from gapforge.envs.protocol import Message, tool_schema
from gapforge.serving.errors import ServingError
from gapforge.serving.openai_policy import EndpointPolicy, _wire
from tests.fakes.fake_openai import FakeOpenAIServer, text_reply, tool_call_message

TOOLS = [tool_schema("lookup", "Look a thing up.", {"key": {"type": "string"}})]
CONVO = [Message.system("be brief"), Message.user("find k1")]


def _policy(srv: FakeOpenAIServer, **kw) -> EndpointPolicy:
    return EndpointPolicy(srv.base_url, "fake-model", retry_backoff_s=0.01, **kw)


def _ask(policy: EndpointPolicy, messages: list[Message], tools: list[dict], **kw) -> Message:
    """One respond() in its own event loop, closing the HTTP session before the loop ends."""

    async def go() -> Message:
        try:
            return await policy.respond(messages, tools, **kw)
        finally:
            await policy.aclose()

    return asyncio.run(go())


def test_tool_call_answer_and_request_shape() -> None:
    with FakeOpenAIServer(lambda _r: tool_call_message("lookup", {"key": "k1"}, call_id="c7")) as srv:
        msg = _ask(_policy(srv, temperature=0.3, max_tokens=64), CONVO, TOOLS)
        req = srv.requests[0]
    assert msg.role == "assistant" and msg.tool_calls[0].name == "lookup"
    assert msg.tool_calls[0].arguments == {"key": "k1"} and msg.tool_calls[0].id == "c7"
    assert req["model"] == "fake-model" and req["temperature"] == 0.3 and req["max_tokens"] == 64
    assert req["tools"] == TOOLS and [m["role"] for m in req["messages"]] == ["system", "user"]


def test_temperature_override_and_text_answer() -> None:
    with FakeOpenAIServer(text_reply("hello")) as srv:
        msg = _ask(_policy(srv), CONVO, [], temperature=0.0)
        assert srv.requests[0]["temperature"] == 0.0 and "tools" not in srv.requests[0]
    assert msg.content == "hello" and msg.tool_calls == []


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_failures_are_retried(status: int) -> None:
    with FakeOpenAIServer(text_reply("ok"), fail_first=2, fail_status=status) as srv:
        msg = _ask(_policy(srv, max_retries=3), CONVO, TOOLS)
        assert srv.request_count == 3
    assert msg.content == "ok"


def test_exhausted_retries_raise_endpoint_error() -> None:
    with FakeOpenAIServer(text_reply("ok"), fail_first=100) as srv:
        with pytest.raises(EndpointError, match="failed 3 attempt"):
            _ask(_policy(srv, max_retries=2), CONVO, TOOLS)
        assert srv.request_count == 3


def test_unreachable_endpoint_is_endpoint_error() -> None:
    policy = EndpointPolicy("http://127.0.0.1:9/v1", "m", max_retries=1, retry_backoff_s=0.01, timeout_s=2)
    with pytest.raises(EndpointError, match="127.0.0.1:9"):
        _ask(policy, CONVO, TOOLS)


@pytest.mark.parametrize("status,exc", [(400, PolicyError), (401, ServingError), (404, ServingError)])
def test_client_errors_are_not_retried(status: int, exc: type[Exception]) -> None:
    with FakeOpenAIServer(text_reply("ok"), fail_first=100, fail_status=status) as srv:
        with pytest.raises(exc):
            _ask(_policy(srv, max_retries=3), CONVO, TOOLS)
        assert srv.request_count == 1


def test_broken_tool_call_json_is_malformed_output() -> None:
    def broken(_r: dict) -> dict:
        msg = tool_call_message("lookup", {})
        msg["tool_calls"][0]["function"]["arguments"] = '{"key": '
        return msg

    with FakeOpenAIServer(broken) as srv:
        with pytest.raises(MalformedOutputError) as ei:
            _ask(_policy(srv), CONVO, TOOLS)
    assert ei.value.raw == '{"key": '


def test_one_policy_serves_successive_event_loops() -> None:
    """Each asyncio.run gets a session of its own (a session is bound to the loop that made it)."""
    with FakeOpenAIServer(text_reply("ok")) as srv:
        policy = _policy(srv)

        async def twice() -> str:
            out = await policy.respond(CONVO, [])
            await policy.aclose()
            return out.content or ""

        assert asyncio.run(twice()) == "ok"
        assert _ask(policy, CONVO, []).content == "ok"
        assert srv.request_count == 2


def test_bad_url_is_a_user_error() -> None:
    with pytest.raises(ServingError, match="http"):
        EndpointPolicy("localhost:8000", "m")


def _payload(
    policy: EndpointPolicy,
    messages: list[Message],
    tools: list,
    temperature: float | None,
    max_tokens: int | None = None,
) -> dict:
    """The request body, built plainly (what body_text's cached fragments must add up to)."""
    body = {
        "model": policy.model,
        "messages": [_wire(m) for m in messages],
        "temperature": policy.temperature if temperature is None else temperature,
    }
    if tools:
        body["tools"] = tools
    if max_tokens or policy.max_tokens:
        body["max_tokens"] = max_tokens or policy.max_tokens
    return body


def test_the_request_body_is_the_payload_and_each_message_is_encoded_once() -> None:
    import json

    from gapforge.envs.protocol import ToolCall

    policy = EndpointPolicy("http://127.0.0.1:9/v1", "m", max_tokens=64)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    said = Message(
        role="assistant",
        content="done",
        reasoning="think first",
        tool_calls=[ToolCall(id="c1", name="lookup", arguments={"k": "é"})],
    )
    convo = [Message.system("policy"), Message.user("hi"), said, Message.tool("c1", '{"ok": true}', name="lookup")]
    for temperature, max_tokens in ((None, None), (0.3, 5)):
        assert json.loads(policy.body_text(convo, tools, temperature, max_tokens)) == _payload(
            policy, convo, tools, temperature, max_tokens
        )
    encoded = len(policy._wire_cache._items)
    convo.append(Message.user("and now?"))
    json.loads(policy.body_text(convo, tools, None))
    assert len(policy._wire_cache._items) == encoded + 1  # the next turn encodes only the new message
    assert json.loads(policy.body_text([Message.user("hi")], [], None)) == _payload(
        policy, [Message.user("hi")], [], None
    )
