"""Batched labeling-call writes (put_label_calls): keyed upserts, labels replaced per
(episode, pass), one transaction for the batch (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from gapforge.store import Store, StoreError
from gapforge.store.analysis_records import LabelCallRecord
from tests.store.test_store_roundtrip import episode


def rec(
    ep: int, pass_index: int, status: str = "ok", labels=(("a", "LACKING", "[1] no check"), ("b", "NA", "n/a")), **over
) -> LabelCallRecord:
    fields = {
        "dictionary_hash": "h1",
        "prompt_name": "analyst_label",
        "prompt_version": "2",
        "status": status,
        "labels": labels,
        "seed": 5,
    }
    return LabelCallRecord(ep, pass_index, **{**fields, **over})


def test_a_batch_is_written_and_a_rewrite_replaces_not_duplicates(store: Store) -> None:
    rid = store.create_run("trace", {})
    e1, e2, e3 = (episode(store, rid, f"t{i}") for i in range(3))
    for cap in ("a", "b"):
        store.put_capability(rid, cap, definition="d")
    store.put_label_calls(
        rid, [rec(e1, 0), rec(e2, 0), rec(e3, 0, "failed", labels=(), boundary="endpoint", error="HTTP 500 x3")]
    )
    calls = {c.episode_id: c for c in store.label_calls(rid)}
    assert set(calls) == {e1, e2, e3} and calls[e3].status == "failed" and calls[e3].boundary == "endpoint"
    assert calls[e1].answer == [
        {"capability": "a", "label": "LACKING", "evidence": "[1] no check"},
        {"capability": "b", "label": "NA", "evidence": "n/a"},
    ]
    assert sorted((lab.episode_id, lab.capability) for lab in store.labels(rid)) == sorted(
        (e, c) for e in (e1, e2) for c in "ab"
    )
    first_stamp = calls[e1].updated_at

    # the failed one retried (ok now) and e1 relabeled in a second batch: same keys, no duplicates
    store.put_label_calls(
        rid, [rec(e3, 0, calls=2), rec(e1, 0, labels=(("a", "PRESENT", "[2] checked"), ("b", "NA", "n/a")))]
    )
    again = {c.episode_id: c for c in store.label_calls(rid)}
    assert (
        len(store.label_calls(rid)) == 3
        and again[e3].status == "ok"
        and again[e3].calls == 2
        and again[e3].boundary is None
    )
    assert again[e1].id == calls[e1].id and again[e1].updated_at >= first_stamp
    labels = store.labels(rid)
    assert len(labels) == 6 and {(lab.capability, lab.value) for lab in labels if lab.episode_id == e1} == {
        ("a", "PRESENT"),
        ("b", "NA"),
    }
    store.put_label_calls(rid, [rec(e1, 1)])  # another pass is another key
    assert len(store.label_calls(rid, pass_index=1)) == 1 and len(store.labels(rid)) == 8


def test_a_bad_record_fails_the_whole_batch(store: Store) -> None:
    rid = store.create_run("trace", {})
    e1, e2 = episode(store, rid, "t1"), episode(store, rid, "t2")
    store.put_capability(rid, "a", definition="d")
    with pytest.raises(StoreError, match="bad label 'MAYBE'"):
        store.put_label_calls(rid, [rec(e1, 0, labels=(("a", "NA", "x"),)), rec(e2, 0, labels=(("a", "MAYBE", "x"),))])
    with pytest.raises(StoreError, match="names an episode or capability that is not stored"):
        store.put_label_calls(rid, [rec(e1, 0, labels=(("a", "NA", "x"),)), rec(e2, 0, labels=(("ghost", "NA", "x"),))])
    assert store.label_calls(rid) == [] and store.labels(rid) == []  # one transaction: nothing of the batch landed


def vars_of(r: LabelCallRecord) -> dict:
    return {f: getattr(r, f) for f in LabelCallRecord.__dataclass_fields__}


def test_get_episodes_reads_a_chunk_in_the_order_given(store: Store) -> None:
    rid = store.create_run("trace", {})
    ids = [episode(store, rid, f"t{i}", success=i % 2 == 0) for i in range(4)]
    wanted = [ids[2], ids[0], ids[3]]
    rows = store.get_episodes(wanted)
    assert [r.id for r in rows] == wanted and rows == [store.get_episode(i) for i in wanted]  # same rows as one by one
    assert store.get_episodes([]) == []
    with pytest.raises(StoreError, match=f"unknown episode id {max(ids) + 99}"):
        store.get_episodes([ids[0], max(ids) + 99])
