"""make_env / list_envs: fresh instances, one-line errors naming what exists."""

from __future__ import annotations

import sys

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, TargetEnvironment, ToolCall
from gapforge.envs.registry import list_envs, make_env


def test_list_envs_names_shop_tau2_domains_and_toolsandbox() -> None:
    assert list_envs() == ["shop", "tau2:retail", "tau2:airline", "tau2:telecom", "toolsandbox"]


def test_make_env_returns_a_fresh_target_environment_each_call() -> None:
    a, b = make_env("shop"), make_env("shop")
    assert isinstance(a, TargetEnvironment) and a.name == "shop" and a is not b
    a.reset("shop-write-001")
    b.reset("shop-write-001")
    for i, action in enumerate(a.task("shop-write-001").gold_actions):  # type: ignore[attr-defined]
        a.step(Message.assistant(tool_calls=[ToolCall(id=f"c{i}", name=action.name, arguments=action.arguments)]))
    assert a.score().components["db"] == 1.0
    assert b.score().components["db"] == 0.0  # b's database did not see a's cancellation


@pytest.mark.parametrize(
    ("name", "user", "pattern"),
    [
        ("nope", "scripted", r"unknown env 'nope': known envs are shop, tau2:retail, tau2:airline, tau2:telecom"),
        ("tau2:telecomx", "scripted", r"unknown τ²-bench domain 'telecomx'.*known envs are shop"),
        ("shop", "robot", r"unknown user 'robot': use one of scripted, llm"),
    ],
)
def test_bad_names_are_one_line_env_errors(name: str, user: str, pattern: str) -> None:
    with pytest.raises(EnvError, match=pattern) as err:
        make_env(name, user=user)
    assert "\n" not in str(err.value)


def test_tau2_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tau2", None)  # what an install without the extra looks like to `import`
    with pytest.raises(EnvError, match=r"env 'tau2:retail' needs the tau2 extra: pip install 'gapforge\[tau2\]'"):
        make_env("tau2:retail")


@pytest.mark.tau2
def test_tau2_names_build_the_adapter() -> None:
    pytest.importorskip("tau2")
    env = make_env("tau2:retail")
    assert isinstance(env, TargetEnvironment) and env.task_ids()
