"""The paper's ToolSandbox metrics and the install script's offline behaviour (no ToolSandbox venv needed)."""

from __future__ import annotations

import asyncio

import pytest

from gapforge.envs.protocol import Message
from gapforge.envs.toolsandbox.install import main as install_main
from gapforge.envs.toolsandbox.metrics import paper_metrics
from tests.envs.toolsandbox_parity import PlanPolicy


def test_paper_metrics_per_category_with_excluded_counts() -> None:
    similarity = {"a": 1.0, "b": 0.5, "c": 0.0}
    categories = {
        "a": ["single_tool_call"],
        "b": ["single_tool_call", "state_dependency"],
        "c": ["state_dependency"],
        "net": ["state_dependency"],
    }
    m = paper_metrics(similarity, categories, excluded={"net": ["search_stock"]})
    assert next(iter(m)) == "all"
    assert (m["all"].run, m["all"].perfect, m["all"].excluded) == (3, 1, 1)
    assert m["all"].mean_similarity == pytest.approx(0.5)
    assert (m["single_tool_call"].run, m["single_tool_call"].perfect, m["single_tool_call"].mean_similarity) == (
        2,
        1,
        0.75,
    )
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
    import gapforge.envs.toolsandbox.env as ts_env
    from gapforge.envs.errors import EnvError
    from gapforge.envs.registry import make_env

    monkeypatch.setenv("GAPFORGE_TOOLSANDBOX_PYTHON", str(tmp_path / "no-python"))
    monkeypatch.setattr(ts_env, "_CATALOG", None)
    with pytest.raises(EnvError, match="make toolsandbox-env") as err:
        make_env("toolsandbox")
    assert "\n" not in str(err.value)


def _put(store, run_id: str, env: str, task: str, reward: float, categories: list[str] | None, sample: int = 0) -> None:
    info = {"categories": categories} if categories is not None else {}
    store.put_episode(
        run_id,
        env,
        task,
        sample,
        policy="p",
        messages=[],
        reward=reward,
        success=reward == 1.0,
        components={},
        termination="done",
        error=None,
        turns=1,
        timings={},
        score_info=info,
    )


def test_stored_metrics_group_by_env_average_samples_and_count_exclusions(tmp_path) -> None:
    from gapforge.envs.toolsandbox.metrics import stored_metrics
    from gapforge.store import Store

    with Store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        run_id = store.create_run("rollouts", {})
        _put(store, run_id, "toolsandbox", "a", 1.0, ["single_tool_call"])
        _put(store, run_id, "toolsandbox", "b", 1.0, ["single_tool_call"], sample=0)
        _put(store, run_id, "toolsandbox", "b", 0.5, ["single_tool_call"], sample=1)  # not perfect over its samples
        _put(store, run_id, "toolsandbox", "c", 0.25, None)  # failed before scoring: no categories in its info
        _put(store, run_id, "toolsandbox?network=stand-in", "net", 1.0, ["canonicalization"])
        _put(store, run_id, "shop", "shop-x", 1.0, None)  # not a toolsandbox env: ignored
        rows = store.episodes(run_id)
    excluded = {
        "toolsandbox": {"net": ["search_stock"]},
        "toolsandbox?network=stand-in": {},
    }
    out = stored_metrics(
        rows, excluded_for=excluded.__getitem__, categories_of=lambda env: {"net": ["canonicalization"]}
    )
    assert [m.env for m in out] == ["toolsandbox", "toolsandbox?network=stand-in"]
    off, rec = out
    assert off.comparable_to_live and off.note is None
    assert (  # the stand-in mode is not comparable to live RapidAPI runs
        rec.network == "stand-in" and not rec.comparable_to_live and "not comparable to live" in (rec.note or "")
    )
    assert (off.network, off.episodes, off.uncategorised) == ("off", 4, ["c"])
    assert (off.categories["all"].run, off.categories["all"].perfect, off.categories["all"].excluded) == (3, 1, 1)
    assert off.categories["all"].mean_similarity == pytest.approx((1.0 + 0.75 + 0.25) / 3)
    assert (off.categories["single_tool_call"].run, off.categories["single_tool_call"].perfect) == (2, 1)
    assert off.categories["canonicalization"].excluded == 1 and off.categories["canonicalization"].run == 0
    assert rec.categories["canonicalization"].perfect == 1 and rec.categories["all"].excluded == 0


def test_cli_toolsandbox_metrics_prints_the_papers_numbers(tmp_path, monkeypatch) -> None:
    import json

    from typer.testing import CliRunner

    from gapforge.cli import app
    from gapforge.store import Store

    monkeypatch.setenv("GAPFORGE_TOOLSANDBOX_PYTHON", str(tmp_path / "no-python"))  # no catalogue: excluded unknown
    with Store(f"sqlite:///{tmp_path / 'gapforge.db'}") as store:
        run_id = store.create_run("rollouts", {})
        _put(store, run_id, "toolsandbox:single_tool_call", "a", 1.0, ["single_tool_call"])
        _put(store, run_id, "toolsandbox:single_tool_call", "b", 0.5, ["single_tool_call", "state_dependency"])
        empty = store.create_run("rollouts", {})
        stand_in = store.create_run("rollouts", {})
        _put(store, stand_in, "toolsandbox?network=stand-in", "net", 1.0, ["canonicalization"])
    runner = CliRunner()
    base = ["--set", f"workspace={tmp_path}"]
    res = runner.invoke(app, ["toolsandbox", "metrics", run_id, "--json", *base])
    assert res.exit_code == 0, res.output
    (env,) = json.loads(res.output)
    assert env["env"] == "toolsandbox:single_tool_call" and env["categories"]["all"] == {
        "run": 2,
        "perfect": 1,
        "mean_similarity": 0.75,
        "excluded": 0,
    }
    assert env["categories"]["state_dependency"]["run"] == 1
    table = runner.invoke(app, ["toolsandbox", "metrics", run_id, *base])
    assert (
        table.exit_code == 0
        and "single_tool_call" in table.output
        and "0.750" in table.output
        and "excluded counts unknown" in table.output
    )
    assert env["comparable_to_live"] is True and "not comparable" not in table.output
    (net,) = json.loads(runner.invoke(app, ["toolsandbox", "metrics", stand_in, "--json", *base]).output)
    assert net["network"] == "stand-in" and net["comparable_to_live"] is False
    shown = runner.invoke(app, ["toolsandbox", "metrics", stand_in, *base])
    assert shown.exit_code == 0 and "not comparable to live RapidAPI runs" in " ".join(shown.output.split())
    for bad in (["toolsandbox", "metrics", empty, *base], ["toolsandbox", "metrics", "r-nope", *base]):
        out = runner.invoke(app, bad)
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output


def test_a_user_endpoint_with_an_unknown_key_is_one_line_without_toolsandboxs_venv() -> None:
    from gapforge.envs.errors import EnvError
    from gapforge.envs.toolsandbox.env import user_spec

    with pytest.raises(EnvError, match="bad endpoint for the ToolSandbox user simulator: colour: Extra inputs") as err:
        user_spec("llm", {"model": "m", "colour": "red"})
    assert "\n" not in str(err.value)
    spec = user_spec("llm", {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"})
    assert (spec["model"], spec["api_key"], spec["timeout_s"]) == ("m", "k", 120.0)  # the key travels to the worker
