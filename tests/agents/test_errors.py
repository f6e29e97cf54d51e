"""agents.errors: a resumable stop told how to resume keeps its class (callers catch the subclass)."""

from __future__ import annotations

import pytest

from agents.errors import IncompleteStage
from agents.rollouts import EnvFailureShare
from executor.processes import WorkerLost


@pytest.mark.parametrize("cls", [IncompleteStage, EnvFailureShare, WorkerLost])
def test_with_resume_keeps_the_stop_s_class_and_says_how_to_resume(cls: type[IncompleteStage]) -> None:
    stop = cls("collect_rollouts: 2 of 8 episodes ended in infrastructure failures")
    told = stop.with_resume("gapforge rollouts collect --resume r1")
    assert type(told) is cls and told.summary == stop.summary and told.resume == "gapforge rollouts collect --resume r1"
    assert str(told) == "collect_rollouts: 2 of 8 episodes ended in infrastructure failures: resume with `gapforge rollouts collect --resume r1`"
    assert told.with_resume("another command") is told  # the first command told stays
