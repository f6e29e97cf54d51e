"""`split_openings`: the openings of a run's stored episodes by split, what check `contamination` guards."""

from __future__ import annotations

from pathlib import Path

from gapforge.agents.analysis.split import split_openings
from gapforge.store import Store
from tests.prompts.helpdesk import TASKS, store_run


def test_openings_follow_the_stored_split(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store_run(store)
        split = store.get_split(run)
        texts = split_openings(store, run)
        assert texts is not None and set(texts.heldout) == set(split.heldout_tasks)
        assert texts.heldout == {t: [TASKS[t][1]] for t in split.heldout_tasks}
        assert sorted(texts.analysis) == sorted(TASKS[t][1] for t in split.analysis_tasks)
        assert split_openings(store, run, env="another-env") == type(texts)(
            heldout={}, analysis=[]
        )  # other envs' episodes left out


def test_a_run_without_split_has_no_openings(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        store.create_run("trace", {}, run_id="r-none", versions={})
        assert split_openings(store, "r-none") is None
