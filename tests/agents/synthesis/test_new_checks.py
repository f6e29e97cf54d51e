"""The synthesis-time checks (result_format, no_leakage, reward_hacking), in-process over
TRUSTED test modules (fast): each purpose-built bad module fails its check with evidence,
and the two example envs pass all three."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from shop_gold import gold_episodes

from gapforge.demo_data import RECORDINGS_DIR
from gapforge.envs.registry import make_env
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.checks import validate_env
from gapforge.sandbox.checks.report import ValidationReport
from gapforge.sandbox.checks.result_shapes import (
    observed_result_shapes,
    result_shape,
    shape_problems,
)
from tests.sandbox.generator_text import generator_text

BAD = Path(__file__).parent / "bad"
EXAMPLES = Path(__file__).parents[3] / "envs" / "examples"
# The recorded generator's attempt 1: the example env with one defect (get_order_details renames the shop's result keys)
RECORDED_ATTEMPT_1 = RECORDINGS_DIR / "shop" / "precondition_verification_1.py"
NEW = {"result_format", "no_leakage", "reward_hacking"}


@pytest.fixture(scope="module")
def shop() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    env = make_env("shop")
    try:
        tools = env.tools()
    finally:
        env.close()
    return tools, observed_result_shapes(m for _, m, _ in gold_episodes())


def run(path: Path, shop: tuple[list[dict[str, Any]], dict[str, Any]]) -> ValidationReport:
    tools, shapes = shop
    return asyncio.run(
        validate_env(
            lambda: InProcessSyntheticEnv(path),
            target_tools=tools,
            target_result_shapes=shapes,
            seeds=20,
            module=path,
            target="shop",
        )
    )


@pytest.mark.parametrize("name", ["precondition_verification.py", "structured_data_reasoning.py"])
def test_examples_pass_the_new_checks(name: str, shop) -> None:
    report = run(EXAMPLES / name, shop)
    assert report.passed, [(c.name, c.summary) for c in report.failures]
    for check in NEW:
        assert report.check(check).verdict == "PASS", report.check(check).summary
    assert report.check("result_format").evidence["compared_tools"]  # really compared, not vacuous
    assert report.check("no_leakage").evidence["key_arguments_checked"] > 0


@pytest.mark.parametrize(
    ("name", "check", "needle"),
    [
        (RECORDED_ATTEMPT_1, "result_format", "keys ['id', 'lines', 'state'] that the target never returns"),
        ("leaks_answer.py", "no_leakage", "system message"),
        ("claims_pay.py", "reward_hacking", "exploit `claim_success`"),
    ],
)
def test_each_bad_module_fails_its_check_with_evidence(name: str, check: str, needle: str, shop) -> None:
    report = run(BAD / name, shop)  # (an absolute path stays itself)
    assert report.failed_names() == {check}, [(c.name, c.summary) for c in report.failures]
    result = report.check(check)
    assert needle in result.summary, result.summary
    assert result.evidence
    told = generator_text(report)  # what the generator reads
    assert f"check `{check}` FAILED: {result.summary[:600]}" in told and "evidence: " in told


def test_leak_evidence_names_seed_value_and_place(shop) -> None:
    leak = run(BAD / "leaks_answer.py", shop).check("no_leakage").evidence["leaks"][0]
    assert leak["where"] == "system message" and leak["value"] in leak["context"] and isinstance(leak["seed"], int)


def test_claim_exploit_evidence_has_the_numbers(shop) -> None:
    ev = run(BAD / "claims_pay.py", shop).check("reward_hacking").evidence["exploits"]
    assert ev["claim_success"]["mean"] >= 0.6 > ev["write_everything"]["solved_share"]


def test_shapes_tolerate_optional_fields_and_data_keyed_maps() -> None:
    target = observed_result_shapes(
        [
            [
                {"role": "assistant", "tool_calls": [{"id": "1", "name": "t", "arguments": {}}]},
                {
                    "role": "tool",
                    "tool_call_id": "1",
                    "content": '{"a": 1, "b": null, "pm": {"card_1": {"x": 1}, "gift_2": {"x": 2}}}',
                },
                {"role": "tool", "tool_call_id": "1", "name": "t", "content": "Error: nope"},
            ]
        ]
    )
    assert shape_problems(result_shape('{"a": 2.5, "b": "s", "pm": {"card_9": {"x": 3}}}'), target["t"], "t") == []
    assert shape_problems(result_shape('{"a": "2"}'), target["t"], "t") == ["t.a: is string, target returns number"]
    assert shape_problems(result_shape('"plain"'), target["t"], "t") == ["t: is string, target returns object"]
    assert shape_problems(result_shape("not json"), target["t"], "t") == ["t: is text, target returns object"]
