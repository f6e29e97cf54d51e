"""The agent roles' endpoint calls (analyst, generator, judge: RetryingChatOpenAI and the lean
StructuredHTTP) share the endpoint's one process-wide circuit breaker (envs/breaker.py) with the
rollout policy: with the endpoint down they fail fast after the threshold instead of every call
spending its retries, and a probe after the cooldown closes the circuit again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, ConfigDict

from gapforge.agents import llm
from gapforge.agents.config import EndpointConfig
from gapforge.agents.errors import ModelEndpointError
from gapforge.agents.llm import is_transient, make_chat_model
from gapforge.agents.structured_http import StructuredHTTP
from gapforge.envs.breaker import CircuitBreaker, CircuitOpen
from gapforge.envs.errors import EndpointError
from gapforge.envs.protocol import Message
from gapforge.serving import openai_policy
from gapforge.serving.openai_policy import EndpointPolicy
from tests.fakes.fake_openai import FakeOpenAIServer, structured_reply, text_reply

WIRE = [{"role": "user", "content": "label episode 7"}]
N, THRESHOLD, RETRIES = 16, 3, 4


class Label(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


@pytest.fixture
def breaker(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Sets both clients' breaker constants: THRESHOLD failures, then the given cooldown."""

    def set_cooldown(cooldown_s: float) -> None:
        for module in (llm, openai_policy):
            monkeypatch.setattr(module, "BREAKER_FAILURES", THRESHOLD)
            monkeypatch.setattr(module, "BREAKER_COOLDOWN_S", cooldown_s)

    return set_cooldown


def _model(url: str, backoff_s: float = 0.01):
    return make_chat_model(EndpointConfig(base_url=url, model="fake", max_retries=RETRIES), retry_backoff_s=backoff_s)


async def _structured(client: StructuredHTTP, n: int) -> list[object]:
    return await asyncio.gather(*(client.acall(WIRE, Label) for _ in range(n)), return_exceptions=True)


def test_concurrent_structured_calls_fail_fast_on_a_dead_endpoint_and_recover_after_the_cooldown(
    breaker: Callable[[float], None],
) -> None:
    with FakeOpenAIServer(structured_reply({"name": "precondition_verification"})) as srv:
        srv.set_down(True)
        # a cooldown no slow machine outlasts while the calls run (0.4 s elapsed under load and let a probe out)
        breaker(30)
        model = _model(srv.base_url)

        async def go() -> tuple[list[object], list[object]]:
            async with StructuredHTTP(model) as client:
                first = await _structured(client, N)
                sent = srv.request_count
                second = await _structured(client, N)  # circuit open: no request leaves at all
                return first, second, sent

        first, second, sent = asyncio.run(go())
        assert all(isinstance(o, ModelEndpointError) for o in first + second)
        # fail fast, counted in requests: without the breaker N x (RETRIES + 1) = 80; with it, the first wave of N only
        assert sent <= N + THRESHOLD and srv.request_count == sent
        assert all("is down" in str(o) and srv.base_url in str(o) for o in second)
        assert model.breaker().is_open and model.breaker().opened == 1

        srv.set_down(False)
        # the endpoint's one breaker takes the latest asker's cooldown: 0 ends it now, so the first call is the probe
        # and the others wait for its verdict
        # (callers waiting on the probe retry with backoff: ~3 s in all, so a probe slowed by load still answers in time)
        breaker(0.0)
        model = _model(srv.base_url, backoff_s=0.2)
        assert model.breaker().is_open

        async def back() -> list[object]:
            async with StructuredHTTP(model) as client:
                return await _structured(client, N)

        assert all(o == Label(name="precondition_verification") for o in asyncio.run(back()))
        assert srv.request_count == sent + N and not model.breaker().is_open


def test_half_open_callers_retry_while_the_probe_is_under_way_and_fail_fast_before() -> None:
    now = [0.0]
    b = CircuitBreaker("endpoint x", failures=1, cooldown_s=10, clock=lambda: now[0])
    b.failure("HTTP 503")
    with pytest.raises(CircuitOpen) as early:
        b.check()
    assert not early.value.probing and not is_transient(early.value)  # cooling down: fail fast
    now[0] = 10
    b.check()  # the probe
    with pytest.raises(CircuitOpen, match="probe request is under way") as waiting:
        b.check()
    assert waiting.value.probing and is_transient(waiting.value)  # worth a retry after the backoff


def test_chat_model_and_rollout_policy_share_one_breaker_per_endpoint(breaker: Callable[[float], None]) -> None:
    breaker(30)
    with FakeOpenAIServer(text_reply("ok")) as srv:
        model = _model(srv.base_url + "/")
        policy = EndpointPolicy(srv.base_url, "fake")
        assert policy.breaker is model.breaker()  # keyed by base URL, trailing '/' ignored
        srv.set_down(True)

        async def ask(n: int) -> list[object]:
            return await asyncio.gather(
                *(model.ainvoke([HumanMessage("hi")]) for _ in range(n)), return_exceptions=True
            )

        outs = asyncio.run(ask(4))
        assert all(isinstance(o, ModelEndpointError) for o in outs) and policy.breaker.is_open
        sent = srv.request_count
        assert sent <= 4 + THRESHOLD
        srv.set_down(False)

        # the analyst found the endpoint down: the policy fails at once too, without a request
        async def respond() -> object:
            try:
                return await policy.respond([Message.user("hi")], [])
            except EndpointError as e:
                return e
            finally:
                await policy.aclose()

        out = asyncio.run(respond())
        assert isinstance(out, EndpointError) and "is down" in str(out) and srv.request_count == sent
