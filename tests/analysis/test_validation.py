"""Labeling and discovery validation: every kind of bad output is re-asked once with the
error, then recorded as a labeling failure (never silently NA) / fails discovery in one line."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import discover
from gapforge.agents.analysis.labeling import label_pass
from gapforge.agents.analysis.recorded import load_recording, recorded_analyst
from gapforge.agents.errors import StructuredOutputError
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.envs.shop.env import ShopEnv
from gapforge.store import Store
from tests.fakes.planted_policy import PlantedDeficit, play

CAPS = ("precondition_verification", "user_confirmation")
CFG = AnalysisConfig(passes=1, split_fraction=1.0, bootstrap=0, min_capabilities=2)


def good() -> list[dict]:
    return [{"capability": c, "label": "PRESENT", "evidence": "[1] seen", "message_index": 1} for c in CAPS]


BAD = {
    "missing capability": lambda: good()[:1],
    "unknown name": lambda: good() + [{"capability": "zzz", "label": "NA", "evidence": "-", "message_index": None}],
    "duplicate": lambda: good() + good()[:1],
    "out-of-range evidence": lambda: [{**lab, "message_index": 999} for lab in good()],
    "not json": lambda: "{labels: [oops",
}


@pytest.fixture
def one_episode(tmp_path: Path):
    env = ShopEnv()
    messages, score, termination = play(env, "shop-refusal-001", random.Random(0), PlantedDeficit(refusal_skip=1.0))
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        store.create_run("trace", {}, "r")
        eid = store.put_episode(
            "r",
            "shop",
            "shop-refusal-001",
            0,
            policy="p",
            messages=messages,
            reward=score.reward,
            success=score.success,
            components=score.components,
            termination=termination,
            error=None,
            turns=3,
            timings={},
            task_family="policy_refusal",
        )
        for c in CAPS:
            store.put_capability("r", c, definition=f"{c} definition")
        yield store, eid, len(messages)


def analyst(first, then) -> ScriptedChatModel:
    def rule(messages, tools):
        answer = first() if len(messages) == 2 else then()  # a re-ask appends the answer and the error
        return {"structured": answer if isinstance(answer, str) else {"labels": answer}}

    return ScriptedChatModel.from_dict({"analyst_label": rule})


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_label_output_is_reasked_once_then_accepted(one_episode, kind: str) -> None:
    store, eid, _ = one_episode
    model = analyst(BAD[kind], good)
    result = asyncio.run(label_pass(store, model, "r", 0, cfg=CFG))
    assert (result.labeled, result.failed, result.calls) == (1, 0, 2)
    assert model.used("analyst_label") == 2
    assert sorted(lab.capability for lab in store.labels("r")) == sorted(CAPS)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_label_output_twice_is_recorded_as_failure(one_episode, kind: str) -> None:
    store, eid, _ = one_episode
    result = asyncio.run(label_pass(store, analyst(BAD[kind], BAD[kind]), "r", 0, cfg=CFG))
    assert (result.labeled, result.failed) == (0, 1)
    (call,) = store.label_calls("r")
    assert call.status == "failed" and call.boundary == "model_output" and call.error
    assert store.labels("r") == []  # no silent NA
    # a re-run does not re-ask a recorded failure unless asked to
    again = asyncio.run(label_pass(store, analyst(good, good), "r", 0, cfg=CFG))
    assert (again.cached, again.calls) == (1, 0)
    retried = asyncio.run(label_pass(store, analyst(good, good), "r", 0, cfg=CFG, retry_failed=True))
    assert retried.labeled == 1 and len(store.labels("r")) == len(CAPS)
    assert store.label_calls("r")[0].status == "ok"


def test_error_message_names_the_problem(one_episode) -> None:
    store, _, n = one_episode
    seen: list[str] = []

    def rule(messages, tools):
        if len(messages) > 2:
            seen.append(str(messages[-1].content))
        return {"structured": {"labels": BAD["out-of-range evidence"]()}}

    asyncio.run(label_pass(store, ScriptedChatModel.from_dict({"analyst_label": rule}), "r", 0, cfg=CFG))
    assert seen and f"out of range 0..{n - 1}" in seen[0]


def test_discovery_reasks_unknown_example_ids_then_fails_in_one_line(planted_store) -> None:
    store = planted_store
    cfg = AnalysisConfig(passes=1, bootstrap=0)
    recorded = recorded_analyst("shop")

    def bad(messages, tools):
        ans = recorded._script["analyst_discover"][1](messages, tools)  # the recorded answer ...
        ans["structured"]["capabilities"][0]["example_episode_ids"] = [987654]  # ... citing an episode not shown
        return ans

    with pytest.raises(StructuredOutputError) as err:
        discover(store, ScriptedChatModel.from_dict({"analyst_discover": bad}), "r-analysis", cfg=cfg)
    assert "987654" in str(err.value) and "\n" not in str(err.value)
    assert store.capabilities("r-analysis") == []

    calls = []

    def once_bad(messages, tools):
        calls.append(1)
        return bad(messages, tools) if len(calls) == 1 else recorded._script["analyst_discover"][1](messages, tools)

    found = discover(store, ScriptedChatModel.from_dict({"analyst_discover": once_bad}), "r-analysis", cfg=cfg)
    assert len(calls) == 2 and len(found.capabilities) == len(load_recording("shop"))  # the recorded dictionary
    assert all(set(c.example_episode_ids) <= set(found.sample_episode_ids) for c in found.capabilities)
    # stored: a second discovery makes no call
    assert discover(store, ScriptedChatModel.from_dict({}), "r-analysis", cfg=cfg).cached
