"""EndpointPolicy under injected endpoint faults: a server fault is never the model's, Retry-After
is honoured, and a circuit breaker fails fast on a dead endpoint and closes on recovery."""

from __future__ import annotations

import asyncio

import pytest

from gapforge.envs.breaker import CircuitBreaker, CircuitOpen
from gapforge.envs.errors import EndpointError, MalformedOutputError
from gapforge.envs.protocol import Message
from gapforge.serving import openai_policy
from gapforge.serving.openai_policy import EndpointPolicy, _Transient, retry_after_s
from tests.fakes.fake_openai import FakeOpenAIServer, Faults, text_reply

CONVO = [Message.system("be brief"), Message.user("hi")]


def _ask(policy: EndpointPolicy, n: int = 1) -> list[Message | Exception]:
    async def go() -> list[Message | Exception]:
        try:
            return await asyncio.gather(*(policy.respond(CONVO, []) for _ in range(n)), return_exceptions=True)
        finally:
            await policy.aclose()

    return asyncio.run(go())


def test_a_200_body_that_is_not_json_is_an_endpoint_fault_retried_never_malformed_output() -> None:
    with FakeOpenAIServer(text_reply("ok"), faults=Faults(garbage_rate=1.0)) as srv:
        [out] = _ask(EndpointPolicy(srv.base_url, "m", max_retries=2, retry_backoff_s=0.01))
        assert srv.request_count == 3 and srv.injected == {"garbage": 3}
    assert isinstance(out, EndpointError) and not isinstance(out, MalformedOutputError)
    assert out.termination == "endpoint_error" and "not JSON" in str(out)


def test_garbage_then_a_good_answer_recovers() -> None:
    with FakeOpenAIServer(text_reply("ok"), faults=Faults(garbage_rate=0.5), seed=1) as srv:
        outs = _ask(EndpointPolicy(srv.base_url, "m", max_retries=6, retry_backoff_s=0.01), n=6)
        assert srv.injected.get("garbage", 0) > 0
    assert all(isinstance(o, Message) and o.content == "ok" for o in outs)


@pytest.mark.parametrize("header,seconds", [("2", 2.0), ("0.5", 0.5), ("", None), ("soon", None)])
def test_retry_after_header_values(header: str, seconds: float | None) -> None:
    assert retry_after_s(header) == seconds


def test_a_429_is_retried_and_fails_as_the_endpoints_after_the_last_attempt() -> None:
    with FakeOpenAIServer(text_reply("ok"), faults=Faults(rate_limit_rate=1.0, retry_after_s=0.01)) as srv:
        [out] = _ask(EndpointPolicy(srv.base_url, "m", max_retries=2, retry_backoff_s=0.001))
        assert srv.injected == {"rate_limit": 3}
    assert isinstance(out, EndpointError) and "429" in str(out)


def test_the_wait_before_a_retry_is_at_least_what_retry_after_asked_and_at_most_the_cap() -> None:
    """The seconds `respond` sleeps before retry number n (no clock: the wait is computed, then slept)."""
    policy = EndpointPolicy("http://127.0.0.1:9/v1", "m", retry_backoff_s=0.001, max_retry_after_s=5.0)
    asked = _Transient(429, "slow down", retry_after=0.4)
    assert all(0.4 <= policy._wait(n, asked) < 0.41 for n in (1, 2))  # what the server asked, not the 1 ms backoff
    assert policy._wait(1, _Transient(429, "", retry_after=600.0)) == 5.0  # capped by max_retry_after_s
    assert policy._wait(1, _Transient(503, "")) < 0.01  # no Retry-After: the backoff alone


def test_breaker_fails_fast_on_a_dead_endpoint_and_closes_on_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer(text_reply("ok")) as srv:
        srv.set_down(True)
        # a cooldown no loaded machine outlasts while the 20 callers run
        monkeypatch.setattr(openai_policy, "BREAKER_FAILURES", 5)
        policy = EndpointPolicy(srv.base_url, "m", max_retries=4, retry_backoff_s=0.01)
        outs = _ask(policy, n=20)
        assert all(isinstance(o, EndpointError) for o in outs)
        assert srv.request_count <= 25  # ~ one try per caller; without the breaker 20 callers x 5 attempts = 100
        assert any("is down" in str(o) for o in outs) and policy.breaker.opened == 1
        sent = srv.request_count
        [fast] = _ask(policy)
        assert (
            isinstance(fast, EndpointError) and "is down" in str(fast) and srv.request_count == sent
        )  # open: no request at all
        srv.set_down(False)
        # the endpoint's one breaker takes the latest client's cooldown: 0 ends it now, so the next call is the probe
        monkeypatch.setattr(openai_policy, "BREAKER_COOLDOWN_S", 0.0)
        policy = EndpointPolicy(srv.base_url, "m", max_retries=4, retry_backoff_s=0.01)
        [back] = _ask(policy)
        assert isinstance(back, Message) and not policy.breaker.is_open and srv.request_count == sent + 1


def test_breaker_half_open_lets_one_probe_through() -> None:
    now = [0.0]
    b = CircuitBreaker("svc", failures=2, cooldown_s=10, clock=lambda: now[0])
    b.failure("x")
    b.check()
    b.failure("y")
    with pytest.raises(CircuitOpen, match="2 consecutive"):
        b.check()
    now[0] = 11
    b.check()  # the probe
    with pytest.raises(CircuitOpen):
        b.check()  # others wait for the probe's result
    b.failure("still down")
    with pytest.raises(CircuitOpen):
        b.check()
    now[0] = 22
    b.check()
    b.success()
    b.check()
    assert not b.is_open and b.opened == 1
