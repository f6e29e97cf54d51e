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
