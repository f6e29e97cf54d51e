"""A store or checkpoint file found truncated -- at open or in the middle of a read -- is one line naming
the file and what to do, exit 2, no traceback, for every command that opens it (and the store's API
raises StoreDamaged / CheckpointDamaged instead of a driver error)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import exc
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.graph.checkpoint import CheckpointDamaged, open_checkpointer, open_checkpoints_read_only
from gapforge.store import Store, engine
from gapforge.store.errors import StoreDamaged
from gapforge.store.reader import StoreReader


def _episode(store: Store, run_id: str, task: str) -> None:
    store.put_episode(
        run_id,
        "shop",
        task,
        0,
        policy="p",
        messages=[{"role": "user", "content": "x" * 2000}],
        reward=0.0,
        success=False,
        components={},
        termination="done",
        error=None,
        turns=0,
        timings={},
    )


def _workspace(tmp_path: Path) -> tuple[Path, str]:
    """A workspace with a trace run of 40 episodes (the store spans many pages) and a checkpoint file."""
    ws = tmp_path / "ws"
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {})
        for i in range(40):
            _episode(store, run_id, f"t{i}")

    async def make() -> None:
        async with open_checkpointer(None, ws / "checkpoints.sqlite"):
            pass

    asyncio.run(make())
    conn = sqlite3.connect(
        ws / "checkpoints.sqlite"
    )  # the run's checkpoints, past the schema's pages (the newest last)
    with conn:
        conn.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata) "
            "VALUES (?, '', ?, 'msgpack', ?, ?)",
            [(run_id, f"c{i:02d}", os.urandom(3000), b"{}") for i in range(40)],
        )
    conn.close()  # the last connection checkpoints the WAL into the file
    return ws, run_id


def _cut(path: Path, keep: float) -> None:
    os.truncate(path, int(path.stat().st_size * keep) // 4096 * 4096)


def _one_line(res, *needles: str) -> str:
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(n in errors[0] for n in needles), res.output
    assert "Traceback" not in res.output
    return errors[0]


def _zero_tail(path: Path) -> None:
    """Overwrite the second half's pages with zeros: the length and the header stay right, the rows do not."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(b"\0" * (size - size // 2 // 4096 * 4096))


COMMANDS = [["runs"], ["state", "{run}"], ["history", "{run}"], ["rollouts", "show", "{run}"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_truncated_store_file_is_one_line_exit_2(tmp_path: Path, command: list[str]) -> None:
    ws, run_id = _workspace(tmp_path)
    db = ws / "gapforge.db"
    _cut(db, 0.5)
    res = CliRunner().invoke(app, [c.format(run=run_id) for c in command] + ["--set", f"workspace={ws}"])
    line = _one_line(res, str(db), "damaged")
    assert ".recover" in line and "store.url" in line  # what to do


@pytest.mark.parametrize("damage", ["cut", "zeroed"])
@pytest.mark.parametrize("command", COMMANDS[:3], ids=lambda c: " ".join(c[:2]))
def test_a_damaged_checkpoint_file_is_one_line_exit_2(tmp_path: Path, command: list[str], damage: str) -> None:
    ws, run_id = _workspace(tmp_path)
    ckpt = ws / "checkpoints.sqlite"
    if damage == "cut":
        _cut(ckpt, 0.5)  # shorter than its header says: found when it is opened
    else:
        _zero_tail(ckpt)  # the right length, its rows zeroed: found by the read that reaches them
    res = CliRunner().invoke(app, [c.format(run=run_id) for c in command] + ["--set", f"workspace={ws}"])
    _one_line(res, str(ckpt), "damaged", "move it aside")


def test_a_store_cut_under_an_open_store_is_found_mid_read(tmp_path: Path) -> None:
    db = tmp_path / "gapforge.db"
    with Store(f"sqlite:///{db}") as writer:  # closed: its WAL is checkpointed into the file
        run_id = writer.create_run("rollouts", {})
        for i in range(40):
            _episode(writer, run_id, f"t{i}")
    store = Store(f"sqlite:///{db}")  # opened whole
    _cut(db, 0.5)
    store.engine.dispose()  # the next read opens a new connection on the cut file (a cached page would hide it)
    with pytest.raises(StoreDamaged) as caught:
        store.episodes(run_id)
    assert str(db) in str(caught.value) and "\n" not in str(caught.value)
    store.close()
    with pytest.raises(StoreDamaged):  # the viewer's read-only reader says the same
        StoreReader(f"sqlite:///{db}").episodes(run_id)


def test_a_text_file_is_not_called_a_damaged_store(tmp_path: Path) -> None:
    """Only a file that starts as SQLite is 'damaged'; another file at the store's path is named as not a store."""
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 400)
    with pytest.raises(Exception) as caught:
        Store(f"sqlite:///{notes}")
    assert not isinstance(caught.value, StoreDamaged) and "not a gapforge SQLite store" in str(caught.value)


@pytest.mark.parametrize("damage", [lambda p: _cut(p, 0.5), _zero_tail], ids=["cut", "zeroed"])
def test_the_viewer_checkpoint_reader_names_a_damaged_file(tmp_path: Path, damage) -> None:
    ws, run_id = _workspace(tmp_path)
    damage(ws / "checkpoints.sqlite")

    async def read() -> None:
        async with open_checkpoints_read_only(None, ws / "checkpoints.sqlite") as saver:
            assert saver is not None
            await saver.aget_tuple({"configurable": {"thread_id": run_id, "checkpoint_ns": ""}})

    with pytest.raises(CheckpointDamaged) as caught:
        asyncio.run(read())
    assert str(ws / "checkpoints.sqlite") in str(caught.value)


def _locked_elsewhere(db: Path) -> bool:
    """Whether another process is refused the write lock of `db` right now."""
    probe = "import sqlite3, sys; sqlite3.connect(sys.argv[1], timeout=0).execute('BEGIN IMMEDIATE')"
    return subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True).returncode != 0


def test_naming_a_damaged_store_keeps_the_locks_this_process_holds(tmp_path: Path) -> None:
    """Reading the file with plain Python on the error path would close a descriptor of it, and with it every
    POSIX lock this process's SQLite connections hold there."""
    db = tmp_path / "gapforge.db"
    Store(f"sqlite:///{db}").close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")  # its write lock is a POSIX lock on the file itself
    holder.execute("BEGIN IMMEDIATE")
    assert _locked_elsewhere(db)
    malformed = exc.DatabaseError("SELECT 1", {}, sqlite3.DatabaseError("database disk image is malformed"))
    named = engine._translate(malformed, engine.parse_url(f"sqlite:///{db}"), "the episodes")
    assert isinstance(named, StoreDamaged) and str(db) in str(named)
    assert _locked_elsewhere(db)  # still ours
    holder.execute("ROLLBACK")
    holder.close()
