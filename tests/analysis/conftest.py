"""Fixtures of the analysis tests: a store holding honest planted-deficit shop episodes
(collected once per session, copied per test), the recorded analyst, a small config."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.envs.shop.env import ShopEnv
from gapforge.store import Store
from tests.fakes.planted_policy import collect_planted

RUN = "r-analysis"


def planted_tasks() -> list[str]:
    """Every policy_refusal task and half of the others: a small but mixed fixture."""
    env = ShopEnv()
    ids = env.task_ids()
    return [t for i, t in enumerate(ids) if env.task_family(t) == "policy_refusal" or i % 2 == 0]


@pytest.fixture(scope="session")
def planted_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("planted") / "gapforge.db"
    with Store(f"sqlite:///{path}") as store:
        store.create_run("trace", {}, RUN)
        collect_planted(store, RUN, task_ids=planted_tasks(), samples=2, seed=0)
    return path


@pytest.fixture
def planted_store(planted_db: Path, tmp_path: Path):
    """A private copy of the planted store (tests write labels into it)."""
    path = tmp_path / "ws" / "gapforge.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(planted_db, path)
    with Store(f"sqlite:///{path}") as store:
        yield store


@pytest.fixture
def analysis_cfg() -> AnalysisConfig:
    return AnalysisConfig(passes=3, bootstrap=200, concurrency=8)
