"""Labeling runs: the planted deficit is found, a re-run makes 0 calls, a killed pass resumes
without duplicates, a faulty endpoint (500s + malformed answers) still completes with every
failure recorded."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.labeling import label_pass
from gapforge.agents.analysis.recorded import load_recording, recorded_analyst
from gapforge.agents.config import EndpointConfig
from gapforge.agents.llm import make_chat_model
from tests.fakes.fake_openai import FakeOpenAIServer

RUN = "r-analysis"  # the run tests/analysis/conftest.py collects


async def analyze_run(store, model, run: str, *, cfg: AnalysisConfig) -> SimpleNamespace:
    """The analysis steps in turn, as `gapforge analyze` calls them (gapforge/stages/analysis.py)."""
    from gapforge.agents.analysis.discovery import discover
    from gapforge.agents.analysis.selection import select
    from gapforge.agents.analysis.split import ensure_split

    await asyncio.to_thread(ensure_split, store, run, fraction=cfg.split_fraction, seed=cfg.seed)
    found = await asyncio.to_thread(discover, store, model, run, cfg=cfg)
    passes = [await label_pass(store, model, run, p, cfg=cfg) for p in range(cfg.passes)]
    return SimpleNamespace(
        selection=await asyncio.to_thread(select, store, run, cfg=cfg),
        passes=passes,
        calls_made=found.calls + sum(p.calls for p in passes),
        calls_cached=int(found.cached) + sum(p.cached for p in passes),
    )


def test_planted_deficit_is_retained_decoy_rejected_and_rerun_makes_no_call(planted_store, analysis_cfg) -> None:
    store = planted_store
    model = recorded_analyst("shop")
    report = asyncio.run(analyze_run(store, model, RUN, cfg=analysis_cfg))
    stats = {s.capability: s for s in report.selection.statistics}
    assert report.selection.retained == ("precondition_verification",)
    assert stats["user_confirmation"].verdict != "retained"  # the decoy
    assert stats["precondition_verification"].gap >= 0.2 and stats["precondition_verification"].coverage >= 0.1
    n = report.selection.episodes
    assert sum(p.calls for p in report.passes) == n * analysis_cfg.passes  # exactly one call per (episode, pass)
    used = model.used("analyst_label") + model.used("analyst_discover")
    # the held-out split is never labeled
    split = store.get_split(RUN)
    labeled = {store.get_episode(c.episode_id).task_id for c in store.label_calls(RUN)}
    assert labeled <= set(split.analysis_tasks) and not labeled & set(split.heldout_tasks)

    again = asyncio.run(analyze_run(store, model, RUN, cfg=analysis_cfg))
    assert again.calls_made == 0 and again.calls_cached == 1 + n * analysis_cfg.passes
    assert model.used("analyst_label") + model.used("analyst_discover") == used
    assert again.selection.retained == report.selection.retained
    # other thresholds: recomputed from the same labels, still no call
    strict = asyncio.run(analyze_run(store, model, RUN, cfg=analysis_cfg.model_copy(update={"delta": 0.99})))
    assert strict.calls_made == 0 and strict.selection.retained == ()
    assert store.get_capability(RUN, "precondition_verification").retained is False


KILL_SCRIPT = """
import asyncio, sys, time
from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import discover
from gapforge.agents.analysis.labeling import label_pass
from gapforge.agents.analysis.recorded import load_recording, recorded_analyst
from gapforge.store import Store
store = Store(sys.argv[1])
model = recorded_analyst("shop")
rule = model._script["analyst_label"][1]
def slow(messages, tools):
    time.sleep(0.1)
    return rule(messages, tools)
model._script["analyst_label"] = ("rule", slow)
cfg = AnalysisConfig(passes=1, concurrency=2)
discover(store, model, sys.argv[2], cfg=cfg)
print("labeling", flush=True)
asyncio.run(label_pass(store, model, sys.argv[2], 0, cfg=cfg))
"""


def test_killed_labeling_resumes_without_duplicates(planted_store) -> None:
    store = planted_store
    url = str(store.engine.url)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, url, RUN], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(store.label_calls(RUN)) < 4:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    done_before = len(store.label_calls(RUN))
    assert proc.returncode == -signal.SIGKILL and done_before >= 4, proc.stderr.read().decode()[-500:]
    cfg = AnalysisConfig(passes=1, concurrency=4)
    result = asyncio.run(label_pass(store, recorded_analyst("shop"), RUN, 0, cfg=cfg))
    assert result.cached >= done_before and result.cached + result.labeled == result.episodes
    calls = store.label_calls(RUN)
    labels = store.labels(RUN)
    n_caps = len(store.capabilities(RUN))
    assert len(calls) == result.episodes == len({c.episode_id for c in calls})
    assert len(labels) == result.episodes * n_caps
    assert len({(lab.episode_id, lab.capability, lab.pass_index) for lab in labels}) == len(labels)


def _labels_for(body: dict) -> dict:
    names = [
        c["name"] for c in load_recording("shop")
    ]  # the recorded dictionary's capabilities, as discovery stored them
    return {
        "labels": [{"capability": n, "label": "NA", "evidence": "not needed", "message_index": None} for n in names]
    }


@pytest.mark.parametrize("lean_http", [True, False], ids=["lean-http", "langchain"])
def test_faulty_endpoint_completes_and_records_every_failure(planted_store, lean_http: bool) -> None:
    store = planted_store
    cfg = AnalysisConfig(passes=1, concurrency=8, lean_http=lean_http)
    rng = random.Random(7)
    malformed = []

    def responder(body: dict) -> dict:
        if rng.random() < 0.10:
            malformed.append(1)
            return {"role": "assistant", "content": '{"labels": [ {"capability": "precondition_verification"'}
        text = json.dumps(_labels_for(body))
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": text}}],
            }
        return {"role": "assistant", "content": text}

    discover_model = recorded_analyst("shop")
    from gapforge.agents.analysis.discovery import discover

    discover(store, discover_model, RUN, cfg=cfg)
    with FakeOpenAIServer(responder, fail_rate=0.2, seed=3) as srv:
        model = make_chat_model(EndpointConfig(base_url=srv.base_url, model="fake", max_retries=2), retry_backoff_s=0.0)
        result = asyncio.run(label_pass(store, model, RUN, 0, cfg=cfg))
        requests = srv.request_count
        sent = srv.requests[0]
    from gapforge.agents.analysis.labeling import label_seed

    assert sent["seed"] == label_seed(cfg.seed, 0) and sent["temperature"] == cfg.temperature  # the pass's own sample
    assert sent["messages"][0]["role"] == "system" and sent["messages"][-1]["content"].startswith("### episode")
    calls = store.label_calls(RUN)
    assert len(calls) == result.episodes and result.labeled + result.failed == result.episodes
    assert requests > result.episodes and malformed  # faults were injected and survived
    failed = [c for c in calls if c.status == "failed"]
    assert len(failed) == result.failed
    assert all(c.error and c.boundary in ("endpoint", "model_output") for c in failed)
    ok = {c.episode_id for c in calls if c.status == "ok"}
    assert {lab.episode_id for lab in store.labels(RUN)} == ok
    assert len(store.labels(RUN)) == len(load_recording("shop")) * len(ok)


def test_label_cache_on_postgres(postgres_url: str) -> None:
    """The labeling cache and its one-transaction writes on PostgreSQL (CI runs it)."""
    import secrets

    from gapforge.agents.analysis.discovery import discover
    from gapforge.store import Store
    from tests.fakes.planted_policy import collect_planted

    with Store(postgres_url) as store:
        run = store.create_run("trace", {}, f"an-{secrets.token_hex(4)}")
        collect_planted(
            store,
            run,
            task_ids=["shop-refusal-001", "shop-refusal-002", "shop-write-001", "shop-lookup-001"],
            samples=1,
        )
        cfg = AnalysisConfig(passes=1, split_fraction=1.0, min_capabilities=4)
        model = recorded_analyst("shop")
        discover(store, model, run, cfg=cfg)
        first = asyncio.run(label_pass(store, model, run, 0, cfg=cfg))
        again = asyncio.run(label_pass(store, model, run, 0, cfg=cfg))
        assert first.labeled == first.episodes == 4 and (again.calls, again.cached) == (0, 4)
        assert len(store.labels(run)) == 4 * len(load_recording("shop"))  # every episode x every capability


def test_a_user_fixable_endpoint_error_stops_the_pass_and_records_nothing(planted_store) -> None:
    """401 (bad key) is the user's to fix: ModelError, one line; no labeling failure is recorded."""
    from gapforge.agents.analysis.discovery import discover
    from gapforge.agents.errors import ModelError

    store = planted_store
    cfg = AnalysisConfig(passes=1, concurrency=4)
    discover(store, recorded_analyst("shop"), RUN, cfg=cfg)
    with FakeOpenAIServer(
        lambda body: {"role": "assistant", "content": json.dumps(_labels_for(body))}, fail_first=10**6, fail_status=401
    ) as srv:
        model = make_chat_model(EndpointConfig(base_url=srv.base_url, model="fake", max_retries=3), retry_backoff_s=0.0)
        with pytest.raises(ModelError, match=r"refused the request \(401\): check the API key") as e:
            asyncio.run(label_pass(store, model, RUN, 0, cfg=cfg))
        assert "\n" not in str(e.value)
        assert srv.request_count <= cfg.concurrency  # no retries, no calls after the first refusal came back
    assert store.label_calls(RUN) == [] and store.labels(RUN) == []


def test_endpoint_failures_are_not_final_model_output_failures_are(planted_store) -> None:
    """A resumed pass redoes the calls the endpoint failed, never the model's malformed answers
    (those only with retry_failed)."""
    store = planted_store
    cfg = AnalysisConfig(passes=1, concurrency=4)
    from gapforge.agents.analysis.discovery import discover

    discover(store, recorded_analyst("shop"), RUN, cfg=cfg)

    def answer(body: dict, broken: bool) -> dict:
        text = '{"labels": [' if broken else json.dumps(_labels_for(body))
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": text}}],
            }
        return {"role": "assistant", "content": text}

    def episode_text(body: dict) -> str:
        return next(m["content"] for m in body["messages"] if str(m.get("content") or "").startswith("### episode"))

    with FakeOpenAIServer(lambda b: answer(b, broken=len(episode_text(b)) % 3 == 0), fail_first=6) as srv:
        model = make_chat_model(EndpointConfig(base_url=srv.base_url, model="fake", max_retries=0), retry_backoff_s=0.0)
        asyncio.run(label_pass(store, model, RUN, 0, cfg=cfg))
    failed = store.label_calls(RUN, status="failed")
    at_endpoint = {c.episode_id for c in failed if c.boundary == "endpoint"}
    of_model = {c.episode_id for c in failed if c.boundary == "model_output"}
    assert len(at_endpoint) == 6 and of_model
    with FakeOpenAIServer(lambda b: answer(b, broken=False)) as srv:
        model = make_chat_model(EndpointConfig(base_url=srv.base_url, model="fake", max_retries=0), retry_backoff_s=0.0)
        again = asyncio.run(label_pass(store, model, RUN, 0, cfg=cfg))
        asked = srv.request_count
    assert asked == 6 and again.cached == again.episodes - 6  # only the endpoint's failures were redone
    still = store.label_calls(RUN, status="failed")
    assert {c.episode_id for c in still} == of_model and all(c.boundary == "model_output" for c in still)


def test_recorded_rules_read_a_promise_without_an_order_check_as_lacking_the_check():
    """The taught policy's planted deficit promises instead of acting; the rules must see a claim."""
    from gapforge.agents.analysis.recorded import Trajectory, precondition

    promise = (
        "[0] user: Hi, I want to cancel my order.\n[1] assistant: I can help you cancel an order. What is your email?\n"
        "[2] user: My email is a.b12@example.com.\n[3] assistant: CALL find_customer_by_email(email='a.b12@example.com')\n"
        '[4] tool find_customer_by_email: {"customer_id": "a_b_1234"}\n'
        "[5] assistant: Sure, I have taken care of that for you. It is all processed."
    )
    assert precondition(Trajectory(promise))[:1] == ("LACKING",)
    checked = promise.replace("[5] assistant:", "[5] assistant: CALL get_order_details(order_id='#W1')\n[6] assistant:")
    assert precondition(Trajectory(checked))[0] == "PRESENT"
