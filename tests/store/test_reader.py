"""StoreReader: the store opened for reading only, and the paged queries of store/views.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gapforge.store import LabelIn, Store
from gapforge.store.errors import NoStore, StoreError
from gapforge.store.reader import StoreReader


def _store(tmp_path: Path) -> tuple[str, str, list[int]]:
    url = f"sqlite:///{tmp_path / 'gapforge.db'}"
    with Store(url) as store:
        run = store.create_run("trace", {})
        ids = [
            store.put_episode(
                run,
                "shop",
                f"t{i % 4}",
                i,
                policy="p",
                messages=[{"role": "user", "content": "x" * 5000}],
                reward=float(i % 2),
                success=bool(i % 2),
                components={},
                termination="done",
                error=None,
                turns=1,
                timings={},
                task_family="even" if i % 4 in (0, 2) else "odd",
            )
            for i in range(12)
        ]
        store.put_capability(run, "cap", definition="d")
        for p in range(3):
            store.put_labels(
                run,
                p,
                [LabelIn(e, "cap", "LACKING" if (k + p) % 3 == 0 else "PRESENT", f"ev {p}") for k, e in enumerate(ids)],
            )
    return url, run, ids


def test_paged_queries(tmp_path: Path) -> None:
    url, run, ids = _store(tmp_path)
    with StoreReader(url) as r:
        page = r.episodes_page(run, offset=10, limit=5)
        assert page.total == 12 and [e.id for e in page.rows] == ids[10:]
        assert r.episodes_page(run, success=True, family="odd").total == 6
        assert [e.task_id for e in r.episodes_page(run, task_id="t1").rows] == ["t1"] * 3
        assert r.episode_outcomes(run) == {"episodes": 12, "successes": 6}
        counts = r.label_counts(run, "cap")
        lacking = {e for k, e in enumerate(ids) if any((k + p) % 3 == 0 for p in range(3))}
        assert counts["LACKING"] == len(lacking)
        first = r.labeled_episodes(run, "cap", "LACKING", limit=3)
        assert first.total == len(lacking) and [x.episode.id for x in first.rows] == sorted(lacking)[:3]
        assert [v.pass_index for v in first.rows[0].votes] == [0, 1, 2] and first.rows[0].votes[1].evidence == "ev 1"
        assert [lab.pass_index for lab in r.episode_labels(ids[0])] == [0, 1, 2]


def test_reader_writes_nothing_and_creates_nothing(tmp_path: Path) -> None:
    url, run, _ = _store(tmp_path)
    with StoreReader(url) as r, pytest.raises(Exception, match="readonly"):
        r.set_run_status(run, "failed")
    with pytest.raises(NoStore, match="no store at"):
        StoreReader(f"sqlite:///{tmp_path / 'absent' / 'gapforge.db'}")
    assert not (tmp_path / "absent").exists()
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(NoStore, match="is empty"):
        StoreReader(f"sqlite:///{tmp_path / 'empty.db'}")
    with sqlite3.connect(tmp_path / "gapforge.db") as db:
        db.execute("UPDATE store_meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 999"):
        StoreReader(url)


def test_an_older_store_gets_the_new_indexes_when_a_store_opens_it(tmp_path: Path) -> None:
    url, _, _ = _store(tmp_path)
    with sqlite3.connect(tmp_path / "gapforge.db") as db:
        db.execute("DROP INDEX ix_labels_run_capability_value")
    Store(url).close()
    with sqlite3.connect(tmp_path / "gapforge.db") as db:
        names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"ix_labels_run_capability_value", "ix_episodes_run_family"} <= names
