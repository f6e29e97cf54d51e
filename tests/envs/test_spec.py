"""Env specs: a user's class loaded by file path and by module path through make_env, keywords, env_args, the
parsing order of built-in names, and a spec that survives pickling (worker processes rebuild the env from it)."""

from __future__ import annotations

import functools
import pickle
import shutil
from pathlib import Path

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.loader import parse_class_spec, parse_keywords, with_keywords
from gapforge.envs.protocol import Message, TargetEnvironment, ToolCall
from gapforge.envs.registry import is_builtin, make_env

DATA = Path(__file__).resolve().parents[1] / "data"
DESK = DATA / "your_env" / "desk_env.py"


def _solve(env: TargetEnvironment, task: str, tool: str, account: str) -> float:
    env.reset(task)
    env.step(Message.assistant(tool_calls=[ToolCall(id="c1", name=tool, arguments={"account": account})]))
    return env.score().reward


def test_a_class_outside_the_package_loads_by_file_path_with_its_sibling_module() -> None:
    env = make_env(f"{DESK}:DeskEnv")
    assert isinstance(env, TargetEnvironment)
    assert env.task_ids() == ["desk-reset-001", "desk-reset-002", "desk-unlock-001"]
    assert env.name == f"{DESK}:DeskEnv"  # a class without a name is named by its spec
    assert _solve(env, "desk-unlock-001", "unlock_account", "u-17") == 1.0
    assert _solve(env, "desk-unlock-001", "reset_password", "u-17") == 0.0
    assert make_env(f"{DESK}:DeskEnv") is not env  # a fresh instance per call


def test_a_relative_file_path_and_keywords(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    env = make_env("your_env/desk_env.py:DeskEnv?split=dev")
    assert env.task_ids() == ["desk-reset-001"]


def test_the_same_class_loads_by_module_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(DESK.parent))
    env = make_env("desk_env:DeskEnv?split=dev")
    assert env.task_ids() == ["desk-reset-001"] and env.task_family("desk-reset-001") == "password_reset"


def test_a_module_in_the_current_directory_is_found_as_python_m_would(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for f in ("desk_env.py", "desk_tasks.py"):
        shutil.copy(DESK.parent / f, tmp_path / f.replace("desk_env", "cwd_desk_env"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(
        str(tmp_path / "nowhere")
    )  # sys.path differs from the cwd, as under the gapforge script
    env = make_env("cwd_desk_env:DeskEnv")
    assert len(env.task_ids()) == 3


def test_a_changed_file_is_imported_again(tmp_path: Path) -> None:
    shutil.copytree(DESK.parent, tmp_path / "env")
    path = tmp_path / "env" / "desk_env.py"
    assert len(make_env(f"{path}:DeskEnv").task_ids()) == 3
    path.write_text(path.read_text().replace("else list(TASKS)", "else list(TASKS)[:2]") + "\n")
    assert len(make_env(f"{path}:DeskEnv").task_ids()) == 2


def test_the_factory_pickles_and_rebuilds_the_env() -> None:
    factory = pickle.loads(pickle.dumps(functools.partial(make_env, f"{DESK}:DeskEnv?split=dev", user="scripted")))
    assert factory().task_ids() == ["desk-reset-001"]


def test_keywords_are_json_scalars_else_strings() -> None:
    assert parse_keywords("split=dev&n=3&x=1.5&on=true&none=null&q=%223%22", "s") == {
        "split": "dev",
        "n": 3,
        "x": 1.5,
        "on": True,
        "none": None,
        "q": "3",
    }
    merged = with_keywords("a.py:C?split=dev", {"n": 3, "tag": "007", "name": "a b&c"})
    assert parse_class_spec(merged).kwargs == {"split": "dev", "n": 3, "tag": "007", "name": "a b&c"}
    with pytest.raises(EnvError, match="in both"):
        with_keywords("a.py:C?split=dev", {"split": "test"})
    with pytest.raises(EnvError, match="given twice"):
        parse_keywords("a=1&a=2", "s")


def test_env_args_fold_into_the_env_string_at_load(tmp_path: Path) -> None:
    from gapforge.config import ConfigError, load_config

    cfg = load_config(None, [f"rollouts.env={DESK}:DeskEnv", "rollouts.env_args.split=dev"], environ={})
    assert cfg.rollouts.env == f"{DESK}:DeskEnv?split=dev" and cfg.rollouts.env_args == {}
    again = load_config(None, [f"rollouts.env={cfg.rollouts.env}"], environ={})  # a stored config loads to the same
    assert again.rollouts.env == cfg.rollouts.env
    with pytest.raises(ConfigError, match="applies to an env given as package.module:ClassName"):
        load_config(None, ["rollouts.env=shop", "rollouts.env_args.split=dev"], environ={})


def test_built_in_names_and_prefixes_are_resolved_first() -> None:
    assert all(
        is_builtin(n)
        for n in ("shop", "tau2:retail", "toolsandbox", "toolsandbox:single_tool_call?network=stand-in", "mcp:x.yaml")
    )
    assert not any(is_builtin(n) for n in ("shop.py:Shop", "pkg.mod:Env", "toolsandboxes:X"))
    assert parse_class_spec("my/dir.v2/env.py:Env").kind == "file"
    assert parse_class_spec("pkg.env:Env?k=v").kind == "module"


def test_mcp_without_the_package_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "gapforge.envs.mcp", None)  # what a missing package looks like to `import`
    with pytest.raises(EnvError, match=r"needs the mcp extra: pip install 'gapforge\[mcp\]'") as err:
        make_env("mcp:examples/helpdesk/target.yaml")
    assert "\n" not in str(err.value)


def test_the_example_in_the_docs_loads_and_scores() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "my_agent_env.py"
    env = make_env(f"{example}:BillingEnv")
    assert env.task_ids() == ["refund-001", "refund-002", "plan-001", "lookup-001"]
    env.reset("refund-001")
    env.step(Message.assistant(tool_calls=[ToolCall(id="c", name="refund_invoice", arguments={"invoice_id": "INV-7"})]))
    assert env.score().success
    env.reset("refund-002")  # doing nothing is right on a refusal: the floor a do-nothing policy gets
    assert env.score().success


def test_the_docs_show_the_example_file_as_it_is() -> None:
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "your-agent.md").read_text()
    shown = doc.split("```python\n", 1)[1].split("```", 1)[0]
    assert shown.strip() in (root / "examples" / "my_agent_env.py").read_text()
