"""The SQLite checkpointer leaves the file unlocked however the run that used it ended."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from graph.checkpoint import open_checkpointer


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


async def end_while_a_branch_is_mid_write(path: Path) -> list[asyncio.Task[None]]:
    """What one branch's error does to another branch's `aput_writes`: the run ends, and the checkpointer
    closes, between the writes' INSERT (an executemany) and their commit; the pending branch's frames
    (kept by the error that ended the run) still hold the cursor."""
    async with open_checkpointer(None, path) as saver:
        await saver.conn.execute("CREATE TABLE probe (x INTEGER)")
        await saver.conn.commit()

        async def branch() -> None:  # asyncio.run's shutdown ends it with "Connection closed", kept in its task
            async with saver.conn.executemany("INSERT INTO probe VALUES (?)", [(1,), (2,)]):
                await asyncio.Event().wait()  # the commit that never comes

        pending = [asyncio.create_task(branch())]
        await asyncio.sleep(0.05)
    return pending


def test_a_checkpoint_write_left_uncommitted_leaves_no_lock_behind(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.sqlite"
    pending = asyncio.run(end_while_a_branch_is_mid_write(path))
    assert pending and writable_now(path)  # a resume in this process can write its checkpoints
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM probe").fetchone()[0] == 0  # the uncommitted rows are gone
