"""Round trip of every table, idempotent keyed writes, unknown-id errors (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

import pytest
import sqlalchemy

from gapforge.envs.protocol import Message, ToolCall
from gapforge.store import LabelIn, Store, StoreError

MESSAGES: list[Any] = [
    {"role": "system", "content": "policy: be kind"},
    {"role": "user", "content": "Café order #12 — cancel it ✓"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "cancel", "arguments": '{"id": 12}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
]


def episode(store: Store, run_id: str, task: str = "t1", sample: int = 0, **over: Any) -> int:
    fields: dict[str, Any] = dict(  # noqa: C408 - keyword form mirrors put_episode
        policy="base",
        messages=MESSAGES,
        reward=0.75,
        success=True,
        components={"db": 1.0, "communicate": 0.5},
        termination="done",
        error=None,
        turns=3,
        timings={"total_s": 1.5, "policy_s": 1.0},
        task_family="cancel",
    )
    env = over.pop("env", "retail")
    fields.update(over)
    return store.put_episode(run_id, env, task, sample, **fields)


def test_run_round_trip_and_status(store: Store) -> None:
    config = {"analysis": {"delta": 0.2, "passes": 10}, "seeds": [1, 2]}
    rid = store.create_run("trace", config, run_id="run-a")
    run = store.get_run(rid)
    assert (run.id, run.kind, run.status, run.config) == ("run-a", "trace", "created", config)
    assert run.versions["sqlalchemy"] == sqlalchemy.__version__ and "python" in run.versions
    assert run.created_at.tzinfo is not None

    store.set_run_status(rid, "running")
    after = store.get_run(rid)
    assert after.status == "running" and after.updated_at >= run.updated_at

    auto = store.create_run("collect", {}, versions={"pinned": "1"})
    assert re.fullmatch(r"r-\d{8}-[0-9a-f]{6}", auto)
    assert store.get_run(auto).versions == {"pinned": "1"}
    assert {r.id for r in store.list_runs()} == {"run-a", auto}


def test_existing_run_id_is_an_error_unless_exist_ok(store: Store) -> None:
    store.create_run("trace", {"a": 1}, run_id="dup")
    with pytest.raises(StoreError, match="run 'dup' already exists"):
        store.create_run("trace", {"a": 2}, run_id="dup")
    assert store.create_run("trace", {"a": 2}, run_id="dup", exist_ok=True) == "dup"
    assert [r.config for r in store.list_runs()] == [{"a": 1}]
    with pytest.raises(StoreError, match="bad run id"):
        store.create_run("trace", {}, run_id="no spaces/please")


def test_unknown_run_is_a_one_line_error(store: Store) -> None:
    with pytest.raises(StoreError) as err:
        store.get_run("r-missing")
    assert str(err.value) == "unknown run 'r-missing' in this store: check the run id and store.url"
    with pytest.raises(StoreError, match="unknown run 'r-missing'"):
        episode(store, "r-missing")
    for call in (
        lambda: store.episodes("r-missing"),
        lambda: store.set_run_status("r-missing", "done"),
        lambda: store.put_capability("r-missing", "x", definition="d"),
    ):
        with pytest.raises(StoreError, match="unknown run 'r-missing'"):
            call()


def test_episode_round_trip_filters_and_keys(store: Store) -> None:
    rid = store.create_run("collect", {})
    pydantic_msgs = [Message.user("hi"), Message.assistant(tool_calls=[ToolCall(id="a", name="f", arguments={"x": 1})])]
    e1 = episode(store, rid)
    e2 = episode(store, rid, "t2", 1, success=False, reward=0.0, error="endpoint down", termination="endpoint_error")
    e3 = episode(store, rid, "t1", 0, env="airline", messages=pydantic_msgs, task_family=None)

    row = store.get_episode(e1)
    assert (row.run_id, row.env, row.task_id, row.sample, row.policy) == (rid, "retail", "t1", 0, "base")
    assert row.messages == MESSAGES and row.components == {"db": 1.0, "communicate": 0.5}
    assert (row.reward, row.success, row.turns, row.termination, row.error) == (0.75, True, 3, "done", None)
    assert row.timings == {"total_s": 1.5, "policy_s": 1.0} and row.task_family == "cancel"
    assert store.get_episode(e3).messages == [m.model_dump(mode="json") for m in pydantic_msgs]

    assert [e.id for e in store.episodes(rid)] == [e1, e2, e3]
    assert [e.id for e in store.episodes(rid, env="retail", success=False)] == [e2]
    assert store.get_episode(e2).error == "endpoint down"
    assert store.episode_keys(rid, "retail") == {("t1", 0), ("t2", 1)}
    assert store.episode_keys(rid, "nowhere") == set()
    with pytest.raises(StoreError, match="unknown episode id 999999"):
        store.get_episode(999999)


def test_put_episode_is_write_once(store: Store) -> None:
    rid = store.create_run("collect", {})
    first = episode(store, rid, reward=0.25)
    again = episode(store, rid, reward=1.0, messages=[], success=False)
    assert again == first
    rows = store.episodes(rid)
    assert len(rows) == 1 and rows[0].reward == 0.25 and rows[0].messages == MESSAGES


def test_rows_are_detached_and_frozen(store: Store) -> None:
    rid = store.create_run("collect", {})
    row = store.get_episode(episode(store, rid))
    assert dataclasses.is_dataclass(row) and not hasattr(row, "_sa_instance_state")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.reward = 1.0  # type: ignore[misc]


def test_capabilities_labels_and_stats(store: Store) -> None:
    rid = store.create_run("trace", {})
    e1, e2 = episode(store, rid, "t1"), episode(store, rid, "t2", success=False)
    cap = store.put_capability(
        rid, "datetime_reasoning", definition="v1", example_episode_ids=[e2], prompt_name="discover", prompt_version="3"
    )
    again = store.put_capability(rid, "datetime_reasoning", definition="v2", example_episode_ids=[e1, e2])
    assert again.id == cap.id and again.created_at == cap.created_at and again.definition == "v2"
    assert again.example_episode_ids == [e1, e2] and again.retained is None
    store.put_capability(rid, "tool_precision", definition="d")
    store.set_capability_retained(rid, "datetime_reasoning", True)
    store.set_capability_retained(rid, "tool_precision", False)
    assert [c.name for c in store.capabilities(rid, retained=True)] == ["datetime_reasoning"]
    assert len(store.capabilities(rid)) == 2 and store.get_capability(rid, "nope") is None
    with pytest.raises(StoreError, match="unknown capability 'nope'"):
        store.set_capability_retained(rid, "nope", True)

    n = store.put_labels(
        rid, 0, [LabelIn(e1, "datetime_reasoning", "PRESENT", "used dates"), LabelIn(e2, "datetime_reasoning", "NA")]
    )
    store.put_labels(rid, 0, [LabelIn(e2, "datetime_reasoning", "LACKING", "wrong weekday")])  # same key: replaces
    store.put_labels(rid, 1, [LabelIn(e2, "datetime_reasoning", "LACKING")])
    assert n == 2
    labels = store.labels(rid, pass_index=0)
    assert [(lab.episode_id, lab.value, lab.evidence) for lab in labels] == [
        (e1, "PRESENT", "used dates"),
        (e2, "LACKING", "wrong weekday"),
    ]
    assert len(store.labels(rid)) == 3 and len(store.labels(rid, capability="tool_precision")) == 0
    with pytest.raises(StoreError, match="bad label 'MAYBE'"):
        store.put_labels(rid, 0, [LabelIn(e1, "datetime_reasoning", "MAYBE")])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="not stored"):
        store.put_labels(rid, 0, [LabelIn(e1, "no_such_capability", "NA")])
    other = store.create_run("trace", {})
    with pytest.raises(StoreError, match="not stored"):  # an episode of another run
        store.put_labels(rid, 0, [LabelIn(episode(store, other), "datetime_reasoning", "NA")])

    store.put_capability_stat(rid, "datetime_reasoning", 0, er_plus=0.0, er_minus=1, gap=1, coverage=0.5, kept=True)
    stat = store.put_capability_stat(
        rid, "datetime_reasoning", 0, er_plus=None, er_minus=1, gap=None, coverage=1, kept=False
    )
    assert (stat.er_plus, stat.er_minus, stat.gap, stat.coverage, stat.kept) == (None, 1.0, None, 1.0, False)
    assert isinstance(stat.er_minus, float) and isinstance(stat.coverage, float)
    assert store.capability_stats(rid) == [stat]
    with pytest.raises(StoreError, match="unknown capability 'ghost'"):
        store.put_capability_stat(rid, "ghost", 0, er_plus=0, er_minus=0, gap=0, coverage=0, kept=False)


def test_synthetic_envs_validations_adapters_evaluations(store: Store) -> None:
    rid = store.create_run("trace", {})
    store.put_capability(rid, "precondition_verification", definition="d")
    code = "class Env:\n    pass\n"
    a1 = store.put_synthetic_env(
        rid, "precondition_verification", 1, code=code, status="generated", prompt_name="synthesize", prompt_version="2"
    )
    assert a1.sha256 == hashlib.sha256(code.encode()).hexdigest() and a1.prompt_version == "2"
    a1b = store.put_synthetic_env(rid, "precondition_verification", 1, code=code + "# fix\n", status="generated")
    assert a1b.id == a1.id and a1b.sha256 != a1.sha256
    a2 = store.put_synthetic_env(rid, "precondition_verification", 2, code=code, status="generated")
    store.set_synthetic_env_status(a2.id, "passed")
    assert [(e.attempt, e.status) for e in store.synthetic_envs(rid, "precondition_verification")] == [
        (1, "generated"),
        (2, "passed"),
    ]
    assert store.get_synthetic_env(a1.id).code == code + "# fix\n"
    with pytest.raises(StoreError, match="unknown synthetic env id 424242"):
        store.get_synthetic_env(424242)
    with pytest.raises(StoreError, match="unknown capability 'ghost'"):
        store.put_synthetic_env(rid, "ghost", 1, code=code, status="generated")

    assert store.get_validation(a1.id) is None
    store.put_validation(a1.id, report={"checks": [{"name": "solvable", "ok": False, "seed": 3}]}, passed=False)
    v = store.put_validation(a1.id, report={"checks": [{"name": "solvable", "ok": True}]}, passed=True)
    assert store.get_validation(a1.id) == v and v.passed and v.report["checks"][0]["ok"] is True
    with pytest.raises(StoreError, match="unknown synthetic env id 424242"):
        store.put_validation(424242, report={}, passed=False)

    store.put_adapter(
        rid,
        "precondition_verification",
        path="/a/v1",
        metrics={"reward": 0.3},
        status="training",
        capability="precondition_verification",
    )
    ad = store.put_adapter(
        rid,
        "precondition_verification",
        path="/a/v2",
        metrics={"reward": 0.6},
        status="trained",
        capability="precondition_verification",
    )
    base = store.put_adapter(rid, "mixed_baseline", path="/a/mixed", metrics={}, status="trained")
    assert store.adapters(rid) == [ad, base] and ad.path == "/a/v2" and base.capability is None
    assert store.get_adapter(rid, "precondition_verification") == ad and store.get_adapter(rid, "none") is None

    store.put_evaluation(rid, "target_test", policy="base", metrics={"pass_rate": 0.329})
    ev = store.put_evaluation(rid, "target_test", policy="router", metrics={"pass_rate": 0.47, "per_task": {"t1": 1}})
    assert store.evaluations(rid) == [ev] and store.get_evaluation(rid, "target_test") == ev
    assert store.get_evaluation(rid, "other") is None


def test_data_survives_reopening(store_url: str) -> None:
    with Store(store_url) as s:
        rid = s.create_run("trace", {"k": "v"})
        episode(s, rid)
    with Store(store_url) as s:
        assert s.get_run(rid).config == {"k": "v"} and len(s.episodes(rid)) == 1


def test_add_episodes_stores_many_in_one_go_and_says_which_keys_were_new(store: Store) -> None:
    run = store.create_run("rollouts", {})
    fields = dict(
        policy="p",
        messages=[{"role": "user", "content": "hi"}],
        reward=0.5,
        success=True,
        components={},
        termination="done",
        error=None,
        turns=1,
        timings={"total_s": 0.1},
    )
    first = store.add_episode(run, "shop", "t1", 0, **fields)
    ids = store.add_episodes(run, "shop", [("t0", 0, fields), ("t1", 0, fields), ("t1", 1, {**fields, "reward": 0.25})])
    assert ids[1] is None and ids[0] is not None and ids[2] is not None and first not in ids
    assert store.add_episodes(run, "shop", []) == []
    rows = {(r.task_id, r.sample): r for r in store.episodes(run)}
    assert (
        set(rows) == {("t0", 0), ("t1", 0), ("t1", 1)}
        and rows[("t1", 1)].reward == 0.25
        and rows[("t1", 1)].id == ids[2]
    )
    assert rows[("t0", 0)].messages == fields["messages"]
