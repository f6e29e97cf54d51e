"""Retries of make_chat_model against a local fake OpenAI-compatible server (tests.fakes.fake_openai)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import openai
import pytest

from gapforge.agents.config import EndpointConfig
from gapforge.agents.errors import ModelEndpointError
from gapforge.agents.llm import make_chat_model
from tests.fakes.fake_openai import FakeOpenAIServer, text_reply


def model_for(srv: FakeOpenAIServer, *, max_retries: int = 4, timeout_s: float = 10.0):
    endpoint = EndpointConfig(base_url=srv.base_url, model="fake", max_retries=max_retries, timeout_s=timeout_s)
    return make_chat_model(endpoint, retry_backoff_s=0.0)


@pytest.mark.parametrize(("status", "failures"), [(500, 2), (503, 1), (429, 3)])
def test_transient_failures_are_retried_until_success(status: int, failures: int) -> None:
    with FakeOpenAIServer(text_reply("hello"), fail_first=failures, fail_status=status) as srv:
        out = model_for(srv).invoke("hi")
        assert out.content == "hello"
        assert srv.request_count == failures + 1


async def test_async_path_retries_too() -> None:
    with FakeOpenAIServer(text_reply("async hello"), fail_first=2, fail_status=502) as srv:
        out = await model_for(srv).ainvoke("hi")
        assert out.content == "async hello"
        assert srv.request_count == 3


@pytest.mark.parametrize("max_retries", [0, 2])
def test_always_failing_endpoint_raises_after_the_last_attempt(max_retries: int) -> None:
    with FakeOpenAIServer(text_reply("never"), fail_first=10**6, fail_status=500) as srv:
        with pytest.raises(
            ModelEndpointError,
            match=rf"at {srv.base_url} failed {max_retries + 1} attempt\(s\), last: \w+Error: Error code: 500",
        ) as e:
            model_for(srv, max_retries=max_retries).invoke("hi")
        assert srv.request_count == max_retries + 1
        assert "\n" not in str(e.value)


def test_client_errors_are_not_retried() -> None:
    with FakeOpenAIServer(text_reply("never"), fail_first=1, fail_status=400) as srv:
        with pytest.raises(openai.BadRequestError):
            model_for(srv).invoke("hi")
        assert srv.request_count == 1


def test_a_timeout_is_retried() -> None:
    release = threading.Event()

    def slow_first(req: dict) -> dict:
        if len(srv.requests) == 1:
            release.wait(5)  # longer than the client timeout
        return {"role": "assistant", "content": "late but fine"}

    with FakeOpenAIServer(slow_first) as srv:
        out = model_for(srv, timeout_s=0.5).invoke("hi")
        release.set()
        assert out.content == "late but fine"
        assert srv.request_count == 2  # had the client waited for the first request instead, it would have sent one


def test_backoff_waits_grow() -> None:
    """The waits between retries double from retry_backoff_s, plus up to that much jitter (the model's retry
    policy, read without a clock); with them the retries still end in the answer."""
    with FakeOpenAIServer(text_reply("ok"), fail_first=2, fail_status=500) as srv:
        endpoint = EndpointConfig(base_url=srv.base_url, model="fake", max_retries=2)
        model = make_chat_model(endpoint, retry_backoff_s=0.01)
        assert model.invoke("hi").content == "ok"
        assert srv.request_count == 3
    wait = make_chat_model(endpoint, retry_backoff_s=0.1)._retry_args()["wait"]
    for attempt, floor in ((1, 0.1), (2, 0.2), (3, 0.4)):
        waits = [wait(SimpleNamespace(attempt_number=attempt)) for _ in range(20)]
        assert all(floor <= w <= floor + 0.1 for w in waits), (attempt, waits)
