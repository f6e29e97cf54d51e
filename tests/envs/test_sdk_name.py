"""Env modules import the SDK as `envs.sdk`, its name in the sandbox. Loaded in this process (trusted code:
envs/synthetic.py), that name is gapforge.envs.sdk for the import only: one SyntheticEnv class, and a package of
the user's own called `envs` keeps its name."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from gapforge.envs.sdk import SyntheticEnv
from gapforge.envs.synthetic import InProcessSyntheticEnv, load_env_class

MODULE = '''
from envs.sdk import SyntheticEnv, tool


class Echo(SyntheticEnv):
    capability = "echo"
    description = "Echo the word."
    target = "shop"
    policy = "Echo the word."

    def generate(self, seed):
        return {"opening": f"say w{seed}"}

    @tool
    def echo(self, text: str) -> dict:
        """Echo a word."""
        return {"text": text}

    def reward(self):
        return {"said": float(self.called("echo"))}

    def solution(self, seed):
        return [{"tool": "echo", "arguments": {"text": f"w{seed}"}}]
'''


def test_an_env_module_importing_envs_sdk_gets_gapforges_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    users_own = types.ModuleType("envs")
    monkeypatch.setitem(sys.modules, "envs", users_own)
    monkeypatch.delitem(sys.modules, "envs.sdk", raising=False)
    (tmp_path / "echo_env.py").write_text(MODULE)

    cls = load_env_class(tmp_path / "echo_env.py")

    assert issubclass(cls, SyntheticEnv)
    assert sys.modules["envs"] is users_own and "envs.sdk" not in sys.modules
    env = InProcessSyntheticEnv(cls)
    env.reset(3)
    assert env.solution(3) == [{"tool": "echo", "arguments": {"text": "w3"}}]


def test_threads_loading_env_modules_at_once_each_get_the_one_sdk(tmp_path: Path) -> None:
    """Readiness and evaluation load env modules from many threads at once: every load finds the SDK under its
    sandbox name and returns a subclass of gapforge's SyntheticEnv, and no `envs` alias is left behind."""
    from concurrent.futures import ThreadPoolExecutor

    paths = []
    for i in range(8):
        p = tmp_path / f"echo_{i}.py"
        p.write_text(MODULE)
        paths.append(p)
    before = sys.modules.get("envs")
    with ThreadPoolExecutor(8) as pool:
        classes = list(pool.map(load_env_class, paths * 6))
    assert all(issubclass(c, SyntheticEnv) for c in classes) and len(classes) == 48
    assert sys.modules.get("envs") is before


DATACLASS_MODULE = MODULE.replace(
    "from envs.sdk import SyntheticEnv, tool",
    """from __future__ import annotations

from dataclasses import dataclass

import envs.errors  # noqa: F401  (another envs.<x>: a copy while the alias holds)
from envs.sdk import SyntheticEnv, tool


@dataclass
class Note:
    text: str = ""
""",
)


def test_one_file_loaded_from_threads_at_once_and_an_extra_envs_import_leave_nothing_behind(tmp_path: Path) -> None:
    """A module with a dataclass (dataclasses looks its module up in sys.modules while the class is made), loaded from
    8 threads at once: every load succeeds; its extra `import envs.errors` leaves neither an `envs.errors` entry nor a
    changed gapforge.envs.errors behind."""
    from concurrent.futures import ThreadPoolExecutor

    import gapforge.envs
    import gapforge.envs.errors as errors

    path = tmp_path / "noted.py"
    path.write_text(DATACLASS_MODULE)
    with ThreadPoolExecutor(8) as pool:
        classes = list(pool.map(load_env_class, [path] * 40))
    assert all(issubclass(c, SyntheticEnv) for c in classes)
    assert (
        "envs.errors" not in sys.modules
        and gapforge.envs.errors is errors
        and sys.modules["gapforge.envs.errors"] is errors
    )


def test_loading_while_other_threads_import_does_not_trip_over_sys_modules(tmp_path: Path) -> None:
    """The alias reads and restores sys.modules while other threads import (they add entries): it works on copies,
    so no load fails with 'dictionary changed size during iteration'."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "echo.py"
    path.write_text(MODULE)
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            sys.modules[f"gf_churn_{i % 64}"] = types.ModuleType("churn")
            sys.modules.pop(f"gf_churn_{(i + 32) % 64}", None)
            i += 1

    churner = threading.Thread(target=churn)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(
        1e-6
    )  # switch threads as often as the interpreter allows, so a load's iteration meets the churn
    churner.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            classes = list(pool.map(load_env_class, [path] * 200))
    finally:
        stop.set()
        churner.join()
        sys.setswitchinterval(interval)
        for i in range(64):
            sys.modules.pop(f"gf_churn_{i}", None)
    assert len(classes) == 200 and all(issubclass(c, SyntheticEnv) for c in classes)
