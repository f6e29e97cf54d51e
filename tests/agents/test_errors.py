"""agents.errors: a resumable stop told how to resume keeps its class (callers catch the subclass)."""

from __future__ import annotations

import pytest

from gapforge.agents.errors import IncompleteStage
from gapforge.agents.rollouts import EnvFailureShare
from gapforge.executor.processes import WorkerLost


def test_the_env_failure_share_is_the_env_s_stop_with_its_own_exit_code() -> None:
    """Not an infrastructure stop (3): the env's boundary (4), and the resume line says to fix the env first."""
    stop = EnvFailureShare("env 'x.py:Desk' failed 9 of the 13 planned episodes (env_error=9)")
    assert stop.exit_code == 4 and stop.boundary == "env" and not stop.infrastructure
    told = stop.with_resume("gapforge rollouts collect --run r1")
    assert type(told) is EnvFailureShare and told.resume == "gapforge rollouts collect --run r1"
    assert str(told) == (
        "env 'x.py:Desk' failed 9 of the 13 planned episodes (env_error=9): fix the env's code, then "
        "`gapforge rollouts collect --run r1` plays the failed and unplayed episodes again"
    )
    assert str(stop).endswith(": fix the env's code, then resume (the failed and unplayed episodes are played again)")


@pytest.mark.parametrize("cls", [IncompleteStage, WorkerLost])
def test_with_resume_keeps_the_stop_s_class_and_says_how_to_resume(cls: type[IncompleteStage]) -> None:
    stop = cls("collect_rollouts: 2 of 8 episodes ended in infrastructure failures")
    told = stop.with_resume("gapforge rollouts collect --resume r1")
    assert type(told) is cls and told.summary == stop.summary and told.resume == "gapforge rollouts collect --resume r1"
    assert (
        str(told)
        == "collect_rollouts: 2 of 8 episodes ended in infrastructure failures: resume with `gapforge rollouts collect --resume r1`"
    )
    assert told.with_resume("another command") is told  # the first command told stays


def test_the_disk_full_stops_share_the_resume_wording_and_keep_their_fields() -> None:
    """store.DiskFull and graph's CheckpointDiskFull use gapforge.faults.Resumable too: told how to resume, each keeps
    its class, its path and its own wording (', then resume with ...'), and the untold message still says 'then resume'."""
    from pathlib import Path

    from gapforge.graph.checkpoint import CheckpointDiskFull
    from gapforge.store.errors import DiskFull

    disk = DiskFull("/ws/store.sqlite", "episodes")
    assert str(disk).endswith("free space there, then resume")
    told = disk.with_resume("gapforge run --resume r1")
    assert type(told) is DiskFull and told.path == "/ws/store.sqlite" and told.what == "episodes" and told is not disk
    assert str(told).endswith("free space there, then resume with `gapforge run --resume r1`") and disk.resume is None
    ckpt = CheckpointDiskFull(Path("/ws/checkpoints.sqlite")).with_resume("gapforge run --resume r2")
    assert type(ckpt) is CheckpointDiskFull and ckpt.path == Path("/ws/checkpoints.sqlite") and ckpt.exit_code == 3
    assert str(ckpt).endswith(
        "the last checkpoint stands: free space there, then resume with `gapforge run --resume r2`"
    )


def test_a_stop_told_how_to_resume_keeps_where_it_was_raised_and_its_cause() -> None:
    try:
        try:
            raise OSError("connection refused")
        except OSError as e:
            raise IncompleteStage("collect_rollouts: 1 of 2 episodes ended in infrastructure failures") from e
    except IncompleteStage as e:
        stop = e
        stop.add_note("endpoint http://x")
        told = stop.with_resume("gapforge run --resume r1")
    assert isinstance(told.__cause__, OSError) and told.__traceback__ is stop.__traceback__ is not None
    assert told.__notes__ == ["endpoint http://x"] and told.__notes__ is not stop.__notes__
