"""The routed endpoint's guard: an API key on every route but /health (401 otherwise), and
malformed requests answered 400 with an OpenAI-style error body, never a 500 traceback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from gapforge.envs.protocol import Message
from gapforge.serving.routed_server import RoutedApp
from tests.fakes.routed_server import RoutedServer

KEY = "serve-key-123"


class EchoBackend:
    name = "echo-base"
    adapters = ["a1"]

    async def respond(self, messages: list[Message], tools: list[dict[str, Any]], **_: Any) -> Message:
        return Message.assistant(f"{len(messages)} messages")


class BrokenRouter:
    def __call__(self, _messages: list[dict[str, Any]]) -> Any:
        raise RuntimeError("router bug")


@pytest.fixture(scope="module")
def guarded():
    with RoutedServer(RoutedApp(EchoBackend(), None, api_key=KEY)) as server:
        yield server


def _post(server: RoutedServer, body: Any, key: str | None = KEY, raw: bytes | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if raw is not None:
        return httpx.post(server.base_url + "/chat/completions", content=raw, headers=headers)
    return httpx.post(server.base_url + "/chat/completions", json=body, headers=headers)


def test_every_route_but_health_needs_the_key(guarded: RoutedServer) -> None:
    root = guarded.base_url.removesuffix("/v1")
    assert httpx.get(root + "/health").status_code == 200
    hello = {"model": "echo-base", "messages": [{"role": "user", "content": "hi"}]}
    for key in (None, "wrong", KEY + "x"):
        res = _post(guarded, hello, key=key)
        assert res.status_code == 401 and res.json()["error"]["code"] == "invalid_api_key"
        assert (
            httpx.get(
                guarded.base_url + "/models", headers={"Authorization": f"Bearer {key}"} if key else {}
            ).status_code
            == 401
        )
    assert httpx.get(root + "/v1/nowhere").status_code == 401  # unknown routes too: nothing is learnt without the key
    ok = _post(guarded, hello)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "1 messages"
    assert httpx.get(guarded.base_url + "/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


@pytest.mark.parametrize(
    "body,needle",
    [
        (
            {"model": "echo-base", "messages": [{"role": "assistant", "content": None, "tool_calls": ["x"]}]},
            "messages.0.tool_calls.0",
        ),
        (
            {
                "model": "echo-base",
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}],
            },
            "arguments is not JSON",
        ),
        (
            {
                "model": "echo-base",
                "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}],
            },
            "JSON object",
        ),
        ({"model": "echo-base", "messages": [{"role": "assistant", "tool_calls": "f()"}]}, "must be a list"),
        ({"model": "echo-base", "messages": ["hello"]}, "messages.0"),
        ({"model": "echo-base", "messages": [{"content": "no role"}]}, "role"),
        ({"model": "echo-base", "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ([1, 2], "Input should be"),
        ({"model": "echo-base", "messages": [{"role": "user", "content": "x"}], "bogus": 1}, "bogus"),
    ],
)
def test_malformed_requests_get_400_with_an_openai_error(guarded: RoutedServer, body: Any, needle: str) -> None:
    res = _post(guarded, body)
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"], error


def test_a_body_that_is_not_json_is_400(guarded: RoutedServer) -> None:
    for raw in (b"{not json", b"\xff\xfe"):
        res = _post(guarded, None, raw=raw)
        assert res.status_code == 400 and "not JSON" in res.json()["error"]["message"]


def test_an_unexpected_failure_is_a_json_500_without_a_traceback() -> None:
    with RoutedServer(RoutedApp(EchoBackend(), BrokenRouter())) as server:
        res = _post(server, {"model": "gapforge-router", "messages": [{"role": "user", "content": "hi"}]}, key=None)
    assert res.status_code == 500
    assert (
        res.json()["error"]["type"] == "server_error" and "Traceback" not in res.text and "router bug" not in res.text
    )


def test_no_key_configured_means_open(guarded: RoutedServer) -> None:
    with RoutedServer(RoutedApp(EchoBackend(), None)) as server:
        assert (
            _post(server, {"model": "a1", "messages": [{"role": "user", "content": "hi"}]}, key=None).status_code == 200
        )


def test_a_router_failure_leaves_no_lock_behind() -> None:
    app = RoutedApp(EchoBackend(), BrokenRouter())
    for i in range(3):  # one conversation each: every entry would stay for the server's lifetime
        with pytest.raises(RuntimeError, match="router bug"):
            asyncio.run(app._route(f"conv-{i}", [{"role": "user", "content": "hi"}]))
    assert app._route_locks == {} and app.cache == {}
