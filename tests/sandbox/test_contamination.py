"""Check `contamination` (in-process, trusted envs): the rule, the evidence, the report, and the shop's
demo split against its recorded envs; fidelity and result formats of a non-shop target."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gapforge.agents.analysis.split import split_tasks
from gapforge.config import load_config
from gapforge.demo_data import RECORDINGS_DIR
from gapforge.envs.registry import make_env
from gapforge.envs.sdk import tool
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.checks import CHECKS, SelfTestThresholds, SplitTexts, validate_env
from gapforge.sandbox.checks.contamination import check_contamination, heldout_only, reproduces, words
from gapforge.sandbox.checks.probe import Probe
from gapforge.sandbox.checks.result_shapes import observed_result_shapes
from tests.prompts.helpdesk import TASKS, TOOLS, HelpdeskSynthetic, episode, with_openings
from tests.sandbox.generator_text import generator_text

TH = SelfTestThresholds()
RECORDED = RECORDINGS_DIR / "shop"
HELD = "Security flagged my account after the phishing drill and I cannot sign in anymore."
SPLIT = SplitTexts(
    heldout={"hd-lock-004": [HELD], "hd-lock-002": [TASKS["hd-lock-002"][1]], "hd-vpn-002": ["Help."]},
    analysis=[TASKS["hd-lock-001"][1], TASKS["hd-vpn-001"][1]],
)


def check(env_class: type, split: SplitTexts | None = SPLIT, seeds: int = 4) -> Any:
    probe = Probe(lambda: InProcessSyntheticEnv(env_class))
    try:
        return check_contamination(probe, list(range(seeds)), split, TH.model_copy(update={"contamination_seeds": 6}))
    finally:
        probe.close()


def test_the_rule_exact_near_contained_and_paraphrased() -> None:
    held = words("Hi, I want to cancel my order, I don't need it anymore.")
    assert reproduces(words("hi I want to cancel my order — I don't need it anymore!"), held, 0.9) == 1.0  # normalised
    assert (
        reproduces(words("Hi, I want to cancel my order, I do not need it anymore."), held, 0.9) is None
    )  # 11 of 13 words
    assert reproduces(words("Hi, I want to cancel my order, I don't need it any more."), held, 0.9) is None
    assert reproduces(words("Hi, I wish to cancel my order, I don't need it anymore."), held, 0.9) == pytest.approx(
        11 / 12, abs=1e-3
    )  # one word changed
    assert (
        reproduces(words("Hi, I want to cancel my order, I don't need it anymore. ava@x.com #W12"), held, 0.9)
        is not None
    )  # contained
    assert reproduces(words("Hi, please cancel one of my orders, I changed my mind about it."), held, 0.9) is None


def test_heldout_only_leaves_out_shared_and_short_openings() -> None:
    only = heldout_only(SPLIT, TH)
    assert [tasks for _, tasks in only.values()] == [
        ["hd-lock-004"]
    ]  # hd-lock-002 opens like analysis task hd-lock-001; "Help." is short


def test_an_env_reproducing_heldout_only_text_fails_with_the_seed_and_the_task() -> None:
    result = check(with_openings("Hello, I cannot sign in to my workstation today.", HELD))
    assert result.verdict == "FAIL" and "hd-lock-004" in result.summary
    match = result.evidence["matches"][0]
    assert (match["seed"], match["where"], match["heldout_tasks"]) == (1, "opening", ["hd-lock-004"])
    assert match["said"].startswith(HELD) and match["seeds"] == [
        1,
        3,
        5,
    ]  # every seed that says it (openings of seeds 0..5)
    assert result.evidence["heldout_only"] == 1


def test_a_simulated_user_reply_counts_too() -> None:
    class Replies(HelpdeskSynthetic):
        def user_reply(self, text: str) -> str | None:
            return HELD if "ticket" not in self.state else None

    result = check(Replies)
    assert result.verdict == "FAIL" and result.evidence["matches"][0]["where"].startswith("user reply after action")


def test_shared_or_own_words_pass_and_no_split_is_skipped_not_passed() -> None:
    assert check(with_openings(TASKS["hd-lock-002"][1])).verdict == "PASS"  # shared with the analysis split
    assert check(HelpdeskSynthetic).verdict == "PASS"
    skipped = check(with_openings(HELD), split=None)
    assert skipped.verdict == "SKIP" and skipped.summary.startswith("skipped: no split")
    nothing = check(
        HelpdeskSynthetic,
        split=SplitTexts(heldout={"hd-lock-002": [TASKS["hd-lock-002"][1]]}, analysis=[TASKS["hd-lock-001"][1]]),
    )
    assert nothing.verdict == "PASS" and nothing.evidence["heldout_only"] == 0


def test_the_report_fails_the_env_and_tells_the_generator_which_task() -> None:
    leaking = with_openings(HELD)
    report = asyncio.run(
        validate_env(lambda: InProcessSyntheticEnv(leaking), seeds=4, split_texts=SPLIT, target_tools=TOOLS)
    )
    assert [c.name for c in report.checks] == list(CHECKS) and "contamination" in CHECKS
    assert "contamination" in report.failed_names() and not report.passed
    assert "hd-lock-004" in generator_text(report)
    # the generator is told the task and its own line, never the held-out text itself (stored with the report)
    assert report.check("contamination").evidence["matches"][0]["heldout_text"] == " ".join(words(HELD))
    assert "heldout_text" not in generator_text(report)
    no_split = asyncio.run(validate_env(lambda: InProcessSyntheticEnv(leaking), seeds=4))
    assert no_split.check("contamination").verdict == "SKIP" and "contamination" not in no_split.failed_names()


def test_the_held_out_text_a_paraphrase_matched_never_reaches_the_generator() -> None:
    from gapforge.sandbox.checks.report import evidence_for_generator

    said = "Security flagged my account after the phishing drill and I can't sign in anymore."
    evidence = {"matches": [{"said": said, "heldout_text": HELD, "heldout_tasks": ["hd-lock-004"]}], "heldout_only": 1}
    told = evidence_for_generator(evidence)
    assert HELD not in told and "hd-lock-004" in told and "can't sign in" in told
    assert evidence["matches"][0]["heldout_text"] == HELD  # the stored evidence is not changed


def test_fidelity_and_result_format_work_for_a_non_shop_target() -> None:
    shapes = observed_result_shapes([episode("hd-lock-001", False)])
    report = asyncio.run(
        validate_env(
            lambda: InProcessSyntheticEnv(HelpdeskSynthetic), seeds=4, target_tools=TOOLS, target_result_shapes=shapes
        )
    )
    assert report.check("fidelity").passed and set(report.check("fidelity").evidence["shared_tools"]) == {
        t["function"]["name"] for t in TOOLS
    }
    assert report.check("result_format").passed

    class Renamed(HelpdeskSynthetic):
        @tool
        def get_account(self, employee: str) -> dict:  # type: ignore[override]
            """Read an account."""
            return {"employee_id": employee, "locked": False, "lock_reason": None}

    bad = asyncio.run(
        validate_env(lambda: InProcessSyntheticEnv(Renamed), seeds=4, target_tools=TOOLS, target_result_shapes=shapes)
    )
    assert not bad.check("fidelity").passed and "get_account" in bad.check("fidelity").summary


@pytest.fixture(scope="module")
def shop_demo_split() -> SplitTexts:
    """The offline demo's split (analysis.split_fraction and analysis.seed of the demo's config) with each task's opening."""
    cfg = load_config(None, [])
    env = make_env("shop")
    try:
        split = split_tasks(
            {t: env.task_family(t) for t in env.task_ids()}, cfg.analysis.split_fraction, cfg.analysis.seed
        )
        opening = {t: next(m.content for m in env.reset(t) if m.role == "user") for t in env.task_ids()}
    finally:
        env.close()
    return SplitTexts(heldout={t: [opening[t]] for t in split.heldout}, analysis=[opening[t] for t in split.analysis])


def test_the_shop_split_has_heldout_only_openings_the_recorded_envs_do_not_repeat(shop_demo_split: SplitTexts) -> None:
    only = {tuple(tasks) for _, tasks in heldout_only(shop_demo_split, TH).values()}
    assert ("shop-refusal-001", "shop-refusal-002") in only and (
        "shop-write-004",
        "shop-write-005",
        "shop-write-006",
    ) in only
    for module in sorted(RECORDED.glob("*.py")):
        probe = Probe(lambda m=module: InProcessSyntheticEnv(m))
        try:
            result = check_contamination(probe, list(range(10)), shop_demo_split, TH)
        finally:
            probe.close()
        assert result.verdict == "PASS", (module.name, json.dumps(result.evidence.get("matches"))[:400])
    old = check(
        with_openings("Hi, I want to cancel my order, I don't need it anymore."), split=shop_demo_split
    )  # the wording before
    assert old.verdict == "FAIL" and old.evidence["matches"][0]["heldout_tasks"] == [
        "shop-refusal-001",
        "shop-refusal-002",
    ]
