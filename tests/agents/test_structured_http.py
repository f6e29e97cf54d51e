"""The lean structured-call client (agents/structured_http.py) against the fake OpenAI server:
the same request as ChatOpenAI, one re-ask with the parse error, the model's retry policy,
and failures blamed on the right boundary (endpoint vs model output vs user-fixable)."""

from __future__ import annotations

import functools
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, model_validator

from gapforge.agents.analysis.usage import seeded
from gapforge.agents.config import EndpointConfig
from gapforge.agents.errors import ModelEndpointError, ModelError, StructuredOutputError
from gapforge.agents.llm import astructured_call, make_chat_model
from gapforge.agents.structured_http import StructuredHTTP, Usage
from tests.fakes.fake_openai import FakeOpenAIServer, structured_reply

WIRE = [
    {"role": "system", "content": "You label episodes."},
    {"role": "user", "content": "### episode 7\n[0] user: hi"},
]
GOOD = {"name": "precondition_verification", "index": 2}


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    index: int

    @model_validator(mode="after")
    def _in_range(self) -> Answer:
        if not 0 <= self.index < 5:
            raise ValueError(f"index {self.index} out of range 0..4")
        return self


@functools.cache
def model_for(url: str, *, max_retries: int = 2, timeout_s: float = 10.0):
    """The factory's endpoint model (cached: building one costs ~0.3 s of TLS setup; the lean
    client uses only its settings, never its HTTP clients)."""
    return make_chat_model(
        EndpointConfig(base_url=url, model="fake", max_retries=max_retries, timeout_s=timeout_s), retry_backoff_s=0.0
    )


@pytest.fixture(scope="module")
def shared() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(structured_reply(GOOD)) as srv:
        yield srv


@pytest.fixture
def server(shared: FakeOpenAIServer):
    """The module's fake server, set up for one test: server(responder, fail_first=, fail_status=)."""

    def setup(responder=None, *, fail_first: int = 0, fail_status: int = 500) -> FakeOpenAIServer:
        shared.requests.clear()
        shared.responder, shared.fail_first, shared.fail_status = (
            responder or structured_reply(GOOD),
            fail_first,
            fail_status,
        )
        return shared

    return setup


def answers(*contents: str):
    """A responder giving these contents in order (the last one repeats)."""
    seen: list[int] = []

    def respond(_req: dict) -> dict:
        seen.append(1)
        return {"role": "assistant", "content": contents[min(len(seen), len(contents)) - 1]}

    return respond


async def test_sends_the_request_chatopenai_sends_and_parses_the_answer(server) -> None:
    srv = server(structured_reply(GOOD))
    model = seeded(model_for(srv.base_url), 11, 0.3)
    msgs = [SystemMessage(WIRE[0]["content"]), HumanMessage(WIRE[1]["content"])]
    via_langchain = await astructured_call(model, msgs, Answer)
    usage = Usage()
    async with StructuredHTTP.from_chat_model(model) as client:
        lean = await client.acall(WIRE, Answer, usage=usage)
    assert lean == via_langchain == Answer(**GOOD)
    sdk, ours = srv.requests
    assert ours == sdk  # same body: model, messages, seed, temperature, response_format (strict json_schema)
    assert (
        ours["seed"] == 11 and ours["temperature"] == 0.3 and ours["response_format"]["json_schema"]["name"] == "Answer"
    )
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (1, 1, 1)  # the server's usage


def test_only_endpoint_models_get_a_lean_client() -> None:
    from gapforge.agents.llm import ScriptedChatModel

    assert StructuredHTTP.from_chat_model(ScriptedChatModel.from_dict({"x": ["y"]})) is None
    assert StructuredHTTP.from_chat_model(model_for("http://127.0.0.1:9/v1")) is not None


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ('{"name": "x", "index": ', "Invalid JSON"),
        ('{"name": "x", "index": 9}', "index 9 out of range"),  # the schema's own check: a validation error
        ('{"name": "x", "index": 1, "extra": 1}', "Extra inputs are not permitted"),
        ("", "no Answer object"),
    ],
)
async def test_a_malformed_answer_is_reasked_once_with_its_error(server, bad: str, error: str) -> None:
    srv = server(answers(bad, json.dumps(GOOD)))
    usage = Usage()
    async with StructuredHTTP(model_for(srv.base_url)) as client:
        assert await client.acall(WIRE, Answer, usage=usage) == Answer(**GOOD)
    first, reask = srv.requests
    assert reask["messages"][:2] == first["messages"] == WIRE
    assert reask["messages"][2] == {"role": "assistant", "content": bad}
    assert reask["messages"][3]["role"] == "user" and error in reask["messages"][3]["content"]
    assert usage.calls == 2


async def test_malformed_twice_is_a_structured_output_error(server) -> None:
    srv = server(answers("not json", '{"name": "x", "index": 7}'))
    usage = Usage()
    async with StructuredHTTP(model_for(srv.base_url)) as client:
        with pytest.raises(
            StructuredOutputError, match=r"malformed Answer output twice .*Invalid JSON.*index 7 out of range"
        ):
            await client.acall(WIRE, Answer, usage=usage)
    assert srv.request_count == 2 and usage.calls == 2


async def test_a_refusal_is_the_models_output(server) -> None:
    refusal = {"role": "assistant", "content": None, "refusal": "I will not label this."}
    srv = server(lambda _r: refusal)
    async with StructuredHTTP(model_for(srv.base_url)) as client:
        with pytest.raises(StructuredOutputError, match="the model refused: I will not label this"):
            await client.acall(WIRE, Answer)


async def test_500s_are_retried_by_the_models_policy(server) -> None:
    srv = server(structured_reply(GOOD), fail_first=2, fail_status=503)
    usage = Usage()
    async with StructuredHTTP(model_for(srv.base_url, max_retries=2)) as client:
        assert await client.acall(WIRE, Answer, usage=usage) == Answer(**GOOD)
    assert srv.request_count == 3 and usage.calls == 1  # HTTP retries are one logical call


async def test_an_endpoint_that_keeps_failing_is_blamed_on_the_endpoint(server) -> None:
    srv = server(structured_reply(GOOD), fail_first=10**6, fail_status=500)
    async with StructuredHTTP(model_for(srv.base_url, max_retries=1)) as client:
        with pytest.raises(
            ModelEndpointError, match=r"failed 2 attempt\(s\), last: InternalServerError: Error code: 500"
        ):
            await client.acall(WIRE, Answer)
    assert srv.request_count == 2


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_auth_and_not_found_are_user_fixable_and_not_retried(server, status: int) -> None:
    srv = server(structured_reply(GOOD), fail_first=1, fail_status=status)
    async with StructuredHTTP(model_for(srv.base_url)) as client:
        with pytest.raises(ModelError, match=rf"refused the request \({status}\): check the API key, the model name"):
            await client.acall(WIRE, Answer)
    assert srv.request_count == 1


async def test_a_rejected_request_is_the_endpoints_and_not_retried(server) -> None:
    srv = server(structured_reply(GOOD), fail_first=1, fail_status=400)
    async with StructuredHTTP(model_for(srv.base_url)) as client:
        with pytest.raises(ModelEndpointError, match="BadRequestError: Error code: 400"):
            await client.acall(WIRE, Answer)
    assert srv.request_count == 1


class _Garbage(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"<html>502 Bad Gateway (proxy)</html>" if self.path.endswith("completions") else b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


async def test_a_200_that_is_not_a_completion_is_the_endpoints_not_the_models() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        async with StructuredHTTP(model_for(f"http://127.0.0.1:{server.server_address[1]}/v1")) as client:
            with pytest.raises(ModelEndpointError, match="not a chat completion: '<html>502"):
                await client.acall(WIRE, Answer)
    finally:
        server.shutdown()
        server.server_close()


async def test_connection_refused_and_timeouts_are_retried_then_blamed_on_the_endpoint() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    async with StructuredHTTP(model_for(f"http://127.0.0.1:{port}/v1", max_retries=1)) as client:
        with pytest.raises(ModelEndpointError, match=r"failed 2 attempt\(s\), last: APIConnectionError"):
            await client.acall(WIRE, Answer)
    release = threading.Event()
    with FakeOpenAIServer(lambda _r: (release.wait(5), {"role": "assistant", "content": json.dumps(GOOD)})[1]) as srv:
        async with StructuredHTTP(model_for(srv.base_url, max_retries=1, timeout_s=0.3)) as client:
            with pytest.raises(ModelEndpointError, match=r"failed 2 attempt\(s\), last: APITimeoutError"):
                await client.acall(WIRE, Answer)
        release.set()
        assert srv.request_count == 2
