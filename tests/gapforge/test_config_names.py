"""Config values that are names (task ids, task families) are checked against the target before a run starts:
a typo is one line and exit 2 in the first second, not a traceback after training."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import ConfigError, load_config
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.registry import make_env
from gapforge.evaluation.run import UnknownFamily
from gapforge.faults import InputFault
from gapforge.preflight import check_names

SHOP_FAMILIES = "compound_multi_step, lookup_and_answer, policy_refusal, single_write"


def _refusal(*settings: str) -> str:
    shop = make_env("shop")
    try:
        with pytest.raises(ConfigError) as refused:
            check_names(load_config(None, ["rollouts.env=shop", *settings], environ={}), shop)
    finally:
        shop.close()
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_a_mistyped_focus_family_is_refused_naming_the_families() -> None:
    message = _refusal("evaluation.focus_family=policy_refusl")
    assert message.startswith("evaluation.focus_family: no task of shop is in family 'policy_refusl'")
    assert message.endswith(f"use one of {SHOP_FAMILIES}")


def test_a_mistyped_family_trials_key_is_refused() -> None:
    message = _refusal("evaluation.family_trials.lookup=40")
    assert message.startswith("evaluation.family_trials: no task of shop is in family 'lookup'")


def test_a_family_outside_the_chosen_tasks_is_refused() -> None:
    message = _refusal("rollouts.tasks=[shop-lookup-001]", "evaluation.focus_family=policy_refusal")
    assert "family 'policy_refusal'" in message and message.endswith("use one of lookup_and_answer")


def test_an_unknown_task_id_is_refused() -> None:
    message = _refusal("rollouts.tasks=[shop-lookup-001, shop-lookup-999]")
    assert message.startswith("rollouts.tasks: unknown task id(s) shop-lookup-999 in shop")
    assert "gapforge rollouts tasks shop" in message


def test_the_names_the_demo_gives_pass() -> None:
    shop = make_env("shop")
    try:
        cfg = load_config(
            None,
            ["evaluation.focus_family=policy_refusal", "evaluation.family_trials.policy_refusal=40"],
            environ={},
        )
        check_names(cfg, shop)  # no refusal
    finally:
        shop.close()


def test_a_family_unknown_to_the_evaluation_is_an_input_fault() -> None:
    """The evaluate stage's own check (a standalone `gapforge evaluate`) exits 2 with one line, not a traceback."""
    assert issubclass(UnknownFamily, InputFault) and UnknownFamily("x").exit_code == 2


def test_gapforge_run_refuses_a_mistyped_family_before_it_creates_anything(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--set",
            f"workspace={tmp_path}",
            "--set",
            "policy.kind=local",
            "--set",
            f"policy.local_path={SHOP_POLICY_DIR}",
            "--set",
            "evaluation.focus_family=policy_refusl",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "evaluation.focus_family: no task of shop is in family 'policy_refusl'" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "gapforge.db").exists()  # nothing stored
