"""`stages: fixtures` binds the test suite's fake stage services (tests/fakes/fake_stages.py), which are not installed:
in a checkout it resolves to them; where they cannot be imported (an install without the repository) the setting is
refused with a one-line error naming the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gapforge.config import load_config
from gapforge.errors import UsageError
from gapforge.run_session import stages_for


def test_stages_fixtures_resolves_to_the_suites_fakes_in_a_checkout(tmp_path: Path) -> None:
    from tests.fakes.fake_stages import open_stages

    cfg = load_config(None, [f"workspace={tmp_path}", "stages=fixtures"], environ={})
    assert stages_for(cfg) is open_stages


def test_stages_fixtures_without_the_tests_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tests.fakes.fake_stages", None)  # as if tests/ were not there: the import fails
    cfg = load_config(None, [f"workspace={tmp_path}", "stages=fixtures"], environ={})
    with pytest.raises(UsageError) as e:
        stages_for(cfg)
    assert "\n" not in str(e.value) and "set stages: real" in str(e.value)


def test_a_run_is_not_created_when_its_stage_set_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gapforge.run_session import RunOptions, create_run
    from gapforge.store import Store

    monkeypatch.setitem(sys.modules, "tests.fakes.fake_stages", None)
    cfg = load_config(None, [f"workspace={tmp_path}", "stages=fixtures"], environ={})
    store = Store(cfg.store_url)
    with pytest.raises(UsageError):
        create_run(store, "trace", "run", cfg, RunOptions())
    assert store.list_runs() == []


def test_no_installed_package_holds_a_test_stand_in() -> None:
    from tests.gapforge.test_package_data import installed_packages

    root = Path(__file__).resolve().parents[2]
    stand_ins = {"fake_openai.py", "fake_vllm.py", "vllm_standin.py", "fake_stages.py", "planted_policy.py"}
    assert {p.name for p in (root / "tests" / "fakes").iterdir()} >= stand_ins
    installed = installed_packages()
    assert {"gapforge", "gapforge.agents", "gapforge.training"} <= set(installed)
    assert not [str(f) for d in installed.values() for f in d.glob("*.py") if f.name in stand_ins]
