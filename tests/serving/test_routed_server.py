"""The routed OpenAI-compatible endpoint, called with the official `openai` client:
models/health, routing once per conversation (cached), two adapters concurrently
without cross-talk, errors; and the vLLM forwarding path against a stand-in."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from router_helpers import (
    capability_specs,
    first_messages,
    random_adapter,
    shared_taught_model,
)

from gapforge.agents.router import Router, RoutingConfig, TransformersScorer, make_options
from gapforge.envs.protocol import Message
from gapforge.serving.multi_adapter import MultiAdapterModel
from gapforge.serving.routed_server import ROUTED_MODEL, RoutedApp
from gapforge.serving.vllm_backend import VLLMBackend, adapter_version
from tests.fakes.fake_vllm import FakeVLLMServer
from tests.fakes.routed_server import RoutedServer

ADAPTERS = ("precondition_verification", "structured_data_reasoning")


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    taught = shared_taught_model(tmp_path_factory, tiny_model_dir)
    root = tmp_path_factory.mktemp("adapters")
    paths = {name: random_adapter(taught, root / name, seed=i + 1) for i, name in enumerate(ADAPTERS)}
    backend = MultiAdapterModel(taught, paths, max_new_tokens=6, name="tiny-base")
    router = Router(
        make_options(capability_specs(), RoutingConfig().labels),
        TransformersScorer(backend.model, backend.tokenizer, context=backend.base_context),
    )
    routed = RoutedApp(backend, router.route_messages)
    with RoutedServer(routed) as server:
        yield backend, routed, server, paths


def _client(server: RoutedServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def test_lists_models_and_reports_health(served) -> None:
    _backend, _routed, server, _paths = served
    ids = [m.id for m in _client(server).models.list().data]
    assert ids == [ROUTED_MODEL, "tiny-base", *ADAPTERS]
    import httpx

    health = httpx.get(server.base_url.removesuffix("/v1") + "/health").json()
    assert health["status"] == "ok" and health["adapters"] == list(ADAPTERS)


def test_routes_once_per_conversation_and_says_so(served) -> None:
    _backend, routed, server, _paths = served
    client = _client(server)
    opening = [
        {"role": "system", "content": "You are a shop agent."},
        {"role": "user", "content": first_messages()["A"][0]},
    ]
    before = routed.routed_count
    raw = client.chat.completions.with_raw_response.create(model=ROUTED_MODEL, messages=opening, temperature=0)
    first = raw.parse()
    assert raw.headers["X-Gapforge-Adapter"] == "precondition_verification"
    assert (
        first.model_extra["gapforge"]["decision"]["label"] == "A" and first.model_extra["gapforge"]["cached"] is False
    )
    assert isinstance(first.choices[0].message.content, str) and first.choices[0].finish_reason == "stop"
    follow = [
        *opening,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "ok and now?"},
    ]
    second = client.chat.completions.create(model=ROUTED_MODEL, messages=follow, temperature=0)
    assert (
        second.model_extra["gapforge"]["cached"] is True
        and second.model_extra["gapforge"]["adapter"] == "precondition_verification"
    )
    assert routed.routed_count == before + 1  # one forward pass for the whole conversation
    # a client-chosen conversation id wins over the message hash
    ask = lambda text: client.chat.completions.create(
        model=ROUTED_MODEL, messages=[{"role": "user", "content": text}], extra_headers={"X-Conversation-Id": "conv-42"}
    )
    assert ask(first_messages()["B"][0]).model_extra["gapforge"]["cached"] is False
    again = ask("something else entirely")
    assert (
        again.model_extra["gapforge"]["cached"] is True and again.model_extra["gapforge"]["conversation"] == "conv-42"
    )
    none = client.chat.completions.create(
        model=ROUTED_MODEL, messages=[{"role": "user", "content": first_messages()["C"][0]}]
    )
    assert none.model_extra["gapforge"]["adapter"] is None  # 'none' keeps the base model


def test_two_adapters_concurrently_without_cross_talk(served) -> None:
    backend, _routed, server, _paths = served
    import asyncio

    convs = {
        "precondition_verification": first_messages()["A"][1],
        "structured_data_reasoning": first_messages()["B"][1],
    }
    expected = {
        a: asyncio.run(backend.respond([Message.user(m)], [], adapter=a, temperature=0.0)).content
        for a, m in convs.items()
    }
    assert expected["precondition_verification"] != expected["structured_data_reasoning"]  # the adapters differ

    def ask(adapter: str) -> tuple[str, str, str]:
        r = _client(server).chat.completions.create(
            model=ROUTED_MODEL, messages=[{"role": "user", "content": convs[adapter]}], temperature=0
        )
        return adapter, r.model_extra["gapforge"]["adapter"], r.choices[0].message.content

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(ask, [*convs] * 3))
    for wanted, got_adapter, text in results:
        assert got_adapter == wanted and text == expected[wanted]


def test_tool_history_is_accepted_and_bad_requests_are_refused(served) -> None:
    _backend, _routed, server, _paths = served
    client = _client(server)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_order",
                "description": "d",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        }
    ]
    history = [
        {"role": "user", "content": "Where is order 1?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'},
    ]
    r = client.chat.completions.create(model="tiny-base", messages=history, tools=tools)
    assert r.model_extra["gapforge"]["adapter"] is None and r.choices[0].message.role == "assistant"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-nope", messages=history)
    with pytest.raises(openai.BadRequestError, match="stream"):
        client.chat.completions.create(model="tiny-base", messages=history, stream=True).close()


def test_vllm_forwarding_uses_versioned_adapter_names_and_relays_tool_calls(served, tmp_path: Path) -> None:
    backend, _routed, _server, paths = served
    router = Router(
        make_options(capability_specs(), RoutingConfig().labels),
        TransformersScorer(backend.model, backend.tokenizer, context=backend.base_context),
    )

    def responder(req):
        call = {
            "id": "call_7",
            "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"order_id": "1007"})},
        }
        return (
            {"role": "assistant", "content": None, "tool_calls": [call]}
            if req.get("tools")
            else {"role": "assistant", "content": f"hi from {req['model']}"}
        )

    with FakeVLLMServer("tiny-base", responder=responder) as vllm:
        forward = VLLMBackend(vllm.base_url, "tiny-base", paths, max_retries=0)
        import asyncio

        loaded = asyncio.run(forward.ensure_registered())
        assert sorted(loaded) == sorted(f"{a}-{adapter_version(p)}" for a, p in paths.items())
        assert asyncio.run(forward.ensure_registered()) == []  # already loaded: nothing to do
        with RoutedServer(RoutedApp(forward, router.route_messages)) as server:
            client = _client(server)
            tools = [
                {
                    "type": "function",
                    "function": {"name": "get_order", "parameters": {"type": "object", "properties": {}}},
                }
            ]
            r = client.chat.completions.create(
                model=ROUTED_MODEL, messages=[{"role": "user", "content": first_messages()["B"][0]}], tools=tools
            )
            call = r.choices[0].message.tool_calls[0]
            assert (
                r.choices[0].finish_reason == "tool_calls"
                and call.function.name == "get_order"
                and json.loads(call.function.arguments) == {"order_id": "1007"}
            )
            chat_models = [b["model"] for path, b in vllm.requests if path == "/v1/chat/completions"]
            assert chat_models == [forward.served["structured_data_reasoning"]]
            text = client.chat.completions.create(model="tiny-base", messages=[{"role": "user", "content": "hi"}])
            assert text.choices[0].message.content == "hi from tiny-base"
    # a retrained adapter (new bytes) gets a new served name: no stale vLLM cache
    changed = tmp_path / "changed"
    import shutil

    shutil.copytree(paths["precondition_verification"], changed)
    (changed / "adapter_config.json").write_text((changed / "adapter_config.json").read_text() + "\n")
    assert adapter_version(changed) != adapter_version(paths["precondition_verification"])
    before = adapter_version(changed)
    (changed / "README.md").write_text("a model card")  # not loaded by vLLM: the same name
    assert adapter_version(changed) == before


def test_vllm_forwarding_honours_the_request_s_max_tokens_bounded_by_the_config(tmp_path: Path) -> None:
    adapter = tmp_path / "pv"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with FakeVLLMServer("tiny-base", responder=lambda req: {"role": "assistant", "content": "ok"}) as vllm:
        forward = VLLMBackend(vllm.base_url, "tiny-base", {"pv": adapter}, max_retries=0, max_new_tokens=64)
        import asyncio

        asyncio.run(forward.ensure_registered())
        with RoutedServer(RoutedApp(forward, None)) as server:
            client = _client(server)
            hi = [{"role": "user", "content": "hi"}]
            client.chat.completions.create(model="tiny-base", messages=hi, max_tokens=5)
            client.chat.completions.create(model="pv", messages=hi, max_completion_tokens=7)
            client.chat.completions.create(
                model="tiny-base", messages=hi, max_tokens=10_000
            )  # above the config: capped
            client.chat.completions.create(model="tiny-base", messages=hi)  # none asked: the config's
    sent = [(b["model"], b["max_tokens"]) for path, b in vllm.requests if path == "/v1/chat/completions"]
    assert sent == [("tiny-base", 5), (forward.served["pv"], 7), ("tiny-base", 64), ("tiny-base", 64)]
