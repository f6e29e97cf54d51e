"""The paper's ToolSandbox metrics and the install script's offline behaviour (no ToolSandbox venv needed)."""

from __future__ import annotations

import asyncio

import pytest

from envs.protocol import Message
from envs.toolsandbox.install import main as install_main
from envs.toolsandbox.plan import PlanPolicy, paper_metrics


def test_paper_metrics_per_category_with_excluded_counts() -> None:
    similarity = {"a": 1.0, "b": 0.5, "c": 0.0}
    categories = {"a": ["single_tool_call"], "b": ["single_tool_call", "state_dependency"], "c": ["state_dependency"], "net": ["state_dependency"]}
    m = paper_metrics(similarity, categories, excluded={"net": ["search_stock"]})
    assert next(iter(m)) == "all"
    assert (m["all"].run, m["all"].perfect, m["all"].excluded) == (3, 1, 1)
    assert m["all"].mean_similarity == pytest.approx(0.5)
    assert (m["single_tool_call"].run, m["single_tool_call"].perfect, m["single_tool_call"].mean_similarity) == (2, 1, 0.75)
    assert (m["state_dependency"].run, m["state_dependency"].perfect, m["state_dependency"].excluded) == (2, 0, 1)


def test_plan_policy_replays_tool_calls_then_text_then_done() -> None:
    policy = PlanPolicy([{"tool": "search_contacts", "arguments": {"name": "A"}}, {"text": "Found."}])
    first = asyncio.run(policy.respond([], []))
    assert first.tool_calls[0].name == "search_contacts" and first.tool_calls[0].arguments == {"name": "A"}
    assert asyncio.run(policy.respond([], [])) == Message.assistant("Found.")
    assert asyncio.run(policy.respond([], [])).content == "Done."


def test_install_skips_absent_source_only_when_asked(tmp_path, capsys) -> None:
    missing = str(tmp_path / "nowhere")
    assert install_main(["--source", missing, "--venv", str(tmp_path / "v"), "--if-present"]) == 0
    assert install_main(["--source", missing, "--venv", str(tmp_path / "v")]) == 2
    assert "not found" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()


def test_missing_toolsandbox_env_is_a_one_line_env_error(monkeypatch, tmp_path) -> None:
    import envs.toolsandbox.env as ts_env
    from envs.errors import EnvError
    from envs.registry import make_env

    monkeypatch.setenv("GAPFORGE_TOOLSANDBOX_PYTHON", str(tmp_path / "no-python"))
    monkeypatch.setattr(ts_env, "_CATALOG", None)
    with pytest.raises(EnvError, match="make toolsandbox-env") as err:
        make_env("toolsandbox")
    assert "\n" not in str(err.value)
