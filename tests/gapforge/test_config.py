from __future__ import annotations

import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import ConfigError, load_config


def test_defaults_and_overrides(tmp_path: Path) -> None:
    cfg = load_config(None, ["rollouts.concurrency=16", "analysis.delta=0.3", "rollouts.tasks=[a, b]"], environ={})
    assert cfg.rollouts.concurrency == 16
    assert cfg.analysis.delta == 0.3
    assert cfg.rollouts.tasks == ["a", "b"]
    assert cfg.store_url.startswith("sqlite:///")
    assert (cfg.evaluation.trials, load_config(None, ["evaluation.trials=1"], environ={}).evaluation.trials) == (2, 1)


def test_yaml_then_set_then_env(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("rollouts:\n  samples: 3\npolicy:\n  endpoint:\n    model: m1\n")
    cfg = load_config(f, ["rollouts.samples=5"], environ={"GAPFORGE_POLICY_MODEL": "m2", "OPENAI_API_KEY": "sk-x"})
    assert cfg.rollouts.samples == 5
    assert cfg.policy.endpoint.model == "m2"
    assert cfg.policy.endpoint.api_key is not None and cfg.policy.endpoint.api_key.get_secret_value() == "sk-x"
    assert "api_key" not in cfg.dump()["policy"]["endpoint"]


@pytest.mark.parametrize(
    "yaml_text,overrides,needle",
    [
        ("rollouts:\n  sampels: 3\n", [], "unknown config key 'rollouts.sampels'"),
        ("", ["rollouts.concurrency=0"], "rollouts.concurrency"),
        ("", ["analysis.min_passes=11"], "min_passes"),
        ("rollouts: [1, 2\n", [], "not valid YAML"),
        (
            "training:\n  max_steps: 4\nseed: 3\ntraining:\n  seed: 1\n",
            [],
            "line 4 is not valid YAML ('training' given twice)",
        ),
        ("llm:\n  endpoint:\n    api_key: sk-oops\n", [], "env vars only"),
        ("", ["noequals"], "expected dotted.key=value"),
        ("", ["evaluation.trials=0"], "evaluation.trials"),
        (
            "evaluation:\n  baseline_gepa: true\n",
            [],
            "'evaluation.baseline_gepa' was removed: list gepa in evaluation.comparisons",
        ),
        ("", ["policy.endpoint.breaker_failures=3"], "'policy.endpoint.breaker_failures' was removed: constants"),
        ("", ["evaluation.comparisons=[oracle]"], "evaluation.comparisons"),
    ],
)
def test_bad_config_is_one_line(tmp_path: Path, yaml_text: str, overrides: list[str], needle: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(yaml_text)
    with pytest.raises(ConfigError) as ei:
        load_config(f, overrides, environ={})
    assert needle in str(ei.value)
    assert "\n" not in str(ei.value)


def test_cli_config_show_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["config", "show", "--set", "rollouts.samples=4"])
    assert ok.exit_code == 0, ok.output
    assert "samples: 4" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("bogus_section: 1\n")
    res = runner.invoke(app, ["config", "show", "--config", str(bad)])
    assert res.exit_code == 2
    assert "unknown config key 'bogus_section'" in res.output
    assert "Traceback" not in res.output
    missing = runner.invoke(app, ["config", "show", "--config", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "not found" in missing.output


def test_a_run_that_cannot_train_is_refused_before_it_starts(tmp_path) -> None:
    """Cross-section checks: a run trains adapters, so its policy's weights must be on this machine."""
    from gapforge.config import check_run_config

    with pytest.raises(
        ConfigError, match="policy.kind=scripted cannot be trained: .*set policy.kind=local and policy.local_path=DIR"
    ):
        check_run_config(load_config(None, [], environ={}))
    with pytest.raises(ConfigError, match="policy.kind=endpoint: set policy.local_path"):
        check_run_config(load_config(None, ["policy.kind=endpoint"], environ={}))
    served = load_config(None, ["policy.kind=endpoint", f"policy.local_path={tmp_path}"], environ={})
    with pytest.raises(ConfigError, match="set routing.backend=vllm"):
        check_run_config(served)
    check_run_config(
        load_config(None, ["policy.kind=endpoint", f"policy.local_path={tmp_path}", "routing.backend=vllm"], environ={})
    )
    check_run_config(load_config(None, ["policy.kind=local", f"policy.local_path={tmp_path}"], environ={}))
    with pytest.raises(ConfigError, match="policy.kind=local needs policy.local_path"):
        load_config(None, ["policy.kind=local"], environ={})  # at load, for every command

    ws = tmp_path / "ws"
    out = CliRunner().invoke(app, ["run", "--set", f"workspace={ws}"])  # the default policy is scripted
    assert (
        out.exit_code == 2 and "policy.kind=scripted cannot be trained" in out.output and "Traceback" not in out.output
    )
    assert "run r-" not in out.output  # refused before a run was created


def test_the_optional_comparisons_are_the_registrys_switched_plugins() -> None:
    """`evaluation.comparisons` accepts exactly the names of the comparisons that are not always on."""
    from gapforge.evaluation.config import OptionalComparison
    from gapforge.evaluation.registry import registry

    assert set(typing.get_args(OptionalComparison)) == {c.name for c in registry() if c.optional}
    assert load_config(None, [], environ={}).evaluation.comparisons == ["baseline_grpo_target"]
