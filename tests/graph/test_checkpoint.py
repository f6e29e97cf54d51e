"""The SQLite checkpointer leaves the file unlocked however the run that used it ended."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from gapforge.graph import checkpoint
from gapforge.graph.checkpoint import open_checkpointer


def writable_now(path: Path) -> bool:
    probe = sqlite3.connect(path, timeout=0)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


async def end_while_a_branch_is_mid_write(path: Path, holds_lock: bool) -> list[asyncio.Task[None]]:
    """What one branch's error does to another branch's `aput_writes`: the run ends, and the checkpointer
    closes, between the writes' INSERT (an executemany) and their commit; the pending branch's frames
    (kept by the error that ended the run) still hold the cursor."""
    async with open_checkpointer(None, path) as saver:
        await saver.conn.execute("CREATE TABLE probe (x INTEGER)")
        await saver.conn.commit()

        mid_write = asyncio.Event()

        async def branch() -> None:  # asyncio.run's shutdown ends it with "Connection closed", kept in its task
            if holds_lock:  # as LangGraph's aput_writes does: the saver's lock held across the write
                await saver.lock.acquire()
            async with saver.conn.executemany("INSERT INTO probe VALUES (?)", [(1,), (2,)]):
                mid_write.set()
                await asyncio.Event().wait()  # the commit that never comes

        pending = [asyncio.create_task(branch())]
        await mid_write.wait()
    return pending


@pytest.mark.parametrize("holds_lock", [False, True])
def test_a_checkpoint_write_left_uncommitted_leaves_no_lock_behind(
    tmp_path: Path, monkeypatch, holds_lock: bool
) -> None:
    monkeypatch.setattr(
        checkpoint, "LOCK_WAIT_S", 0.1
    )  # an abandoned writer keeps the saver's lock: wait briefly, then go on
    path = tmp_path / "checkpoints.sqlite"
    pending = asyncio.run(end_while_a_branch_is_mid_write(path, holds_lock))
    assert pending and writable_now(path)  # a resume in this process can write its checkpoints
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM probe").fetchone()[0] == 0  # the uncommitted rows are gone


async def fail_with_the_connection_gone(path: Path) -> None:
    async with open_checkpointer(None, path) as saver:
        await saver.conn.close()  # the cleanup on exit cannot run its statements
        raise ValueError("the error that ended the run")


def test_a_cleanup_that_cannot_run_never_replaces_the_error_that_ended_the_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the error that ended the run"):
        asyncio.run(fail_with_the_connection_gone(tmp_path / "checkpoints.sqlite"))
