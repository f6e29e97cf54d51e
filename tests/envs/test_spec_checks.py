"""A user's env is checked when it loads: every bad spec or broken class is one EnvError line naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.registry import make_env

DATA = Path(__file__).resolve().parents[1] / "data"
BROKEN = DATA / "broken_envs.py"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("my_agent", "unknown env 'my_agent': known envs are shop"),
        ("tests/data/nowhere.py:Env", "file 'tests/data/nowhere.py' not found"),
        ("no_such_pkg.env:Env", "module 'no_such_pkg.env' not found"),
        (f"{BROKEN}:Missing", "has no 'Missing' (it defines: FamilyFails, Good,"),
        (f"{BROKEN}:NOT_A_CLASS", "'NOT_A_CLASS' in"),
        (f"{BROKEN}:Good:", "after ':' give the environment's class name"),
        (f"{BROKEN}:NoStep", "NoStep has no method step(message): add it"),
        (f"{BROKEN}:ResetWithoutTask", "ResetWithoutTask.reset has signature (), but it is called as reset(task)"),
        (f"{BROKEN}:NoTasks", "task_ids() returned []: return a non-empty list"),
        (f"{BROKEN}:FamilyFails", "task_family('t1') raised KeyError"),
        (f"{BROKEN}:ToolsNotSchemas", "tools()[0] lacks type='function'"),
        (f"{BROKEN}:ToolsNotAList", "tools() returned a dict"),
        (f"{BROKEN}:RaisesInInit", "RaisesInInit() raised RuntimeError: database file missing: fix the env's code"),
        (f"{BROKEN}:TakesSplit?splt=dev", "TakesSplit(splt) does not fit its __init__"),
        (
            f"{DATA / 'broken_import.py'}:Env",
            "raised ModuleNotFoundError: No module named 'a_package_nobody_installed': fix the env's code",
        ),
        (f"{BROKEN}:Good?=x", "bad keyword ''"),
        (f"{BROKEN}:Good?novalue", "bad keywords '?novalue'"),
    ],
)
def test_each_bad_spec_is_one_line_naming_the_fix(spec: str, needle: str) -> None:
    with pytest.raises(EnvError) as err:
        make_env(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_good_class_passes_and_keywords_reach_it() -> None:
    assert make_env(f"{BROKEN}:TakesSplit?split=dev").split == "dev"  # type: ignore[attr-defined]


def test_an_llm_user_needs_a_class_that_takes_one() -> None:
    with pytest.raises(EnvError, match="rollouts.user=llm, but Good\\(\\) takes no user= and user_model="):
        make_env(f"{BROKEN}:Good", user="llm", user_model=object())
