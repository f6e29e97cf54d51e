"""The self-test checks, in-process over TRUSTED test modules (fast): each broken module
fails exactly the checks it declares (EXPECTED_FAILURES), with evidence; the control
env and the example envs pass every required check."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from gapforge.demo_data import RECORDINGS_DIR
from gapforge.envs.registry import make_env
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.checks import CHECKS, SelfTestThresholds, validate_env
from gapforge.sandbox.checks.report import ValidationReport
from gapforge.sandbox.errors import EnvCodeError
from tests.sandbox.generator_text import generator_text

BROKEN = Path(__file__).parent / "broken"
EXAMPLES = sorted(p for p in (Path(__file__).parents[2] / "envs" / "examples").glob("*.py") if p.name != "__init__.py")


def declared(path: Path) -> tuple[set[str], str | None]:
    """EXPECTED_FAILURES and VALIDATE_TARGET of a broken module, read without importing it."""
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("EXPECTED_FAILURES", "VALIDATE_TARGET")
        ):
            values[node.targets[0].id] = set() if ast.unparse(node.value) == "set()" else ast.literal_eval(node.value)
    return set(values["EXPECTED_FAILURES"]), values["VALIDATE_TARGET"]


@pytest.fixture(scope="module")
def shop_tools() -> list[dict[str, Any]]:
    env = make_env("shop")
    try:
        return env.tools()
    finally:
        env.close()


def run(path: Path, target_tools: list[dict[str, Any]] | None = None, **kw: Any) -> ValidationReport:
    return asyncio.run(
        validate_env(lambda: InProcessSyntheticEnv(path), target_tools=target_tools, seeds=20, module=path, **kw)
    )


IN_PROCESS = sorted(
    p.name for p in BROKEN.glob("*.py") if "DOCKER_ONLY = True" not in p.read_text()
)  # hangs/floods need the sandbox


@pytest.mark.parametrize("name", IN_PROCESS)
def test_each_broken_module_fails_exactly_its_checks(name: str, shop_tools: list[dict[str, Any]]) -> None:
    path = BROKEN / name
    expected, target = declared(path)
    report = run(path, shop_tools if target == "shop" else None)
    assert report.failed_names() == expected, [(c.name, c.summary) for c in report.failures]
    assert [c.name for c in report.checks] == list(CHECKS)
    assert report.passed == (not expected)
    assert report.check("grpo_ready").verdict == "SKIP" and not report.check("grpo_ready").required
    for check in report.failures:
        assert check.summary and check.evidence, f"{check.name} failed without evidence"
    assert report.module_sha256 and len(report.module_sha256) == 64
    assert report.capability == "precondition_verification"


def test_evidence_names_seed_and_what_happened(shop_tools: list[dict[str, Any]]) -> None:
    nondet = run(BROKEN / "nondeterministic.py").check("deterministic")
    assert nondet.evidence["where"] == "initial message 1" and isinstance(nondet.evidence["seed"], int)
    assert "ticket" in nondet.evidence["first"] and nondet.evidence["first"] != nondet.evidence["second"]

    unsolved = run(BROKEN / "unsolvable.py").check("solvable")
    assert unsolved.evidence["solved_share"] == 0.0
    first = unsolved.evidence["unsolved"][0]
    assert (
        first["seed"] == 0
        and first["reward"] == pytest.approx(2 / 3, abs=1e-3)
        and first["components"]["informed"] == 0.0
    )

    constant = run(BROKEN / "constant_reward.py")
    assert constant.check("not_trivial").evidence["do_nothing"]["mean"] == 1.0
    assert constant.check("graded").evidence["distinct_rewards"] == [1.0]

    schema = run(BROKEN / "bad_schema.py", shop_tools)
    assert any("get_order_details" in p and "'object'" in p for p in schema.check("loads").evidence["problems"])
    assert schema.check("fidelity").evidence["shared_tools"] == [
        "cancel_pending_order"
    ]  # the valid tools are still compared

    mismatch = run(BROKEN / "shop_mismatch.py", shop_tools).check("fidelity")
    assert mismatch.evidence["problems"] == ["tool 'get_order_details': parameters ['id'] != target's ['order_id']"]
    unrelated = [{**t, "function": {**t["function"], "name": f"other_{t['function']['name']}"}} for t in shop_tools]
    nothing_shared = run(BROKEN / "shop_mismatch.py", unrelated).check("fidelity")
    assert nothing_shared.verdict == "SKIP" and nothing_shared.evidence["shared_tools"] == []  # no evidence: not a PASS

    raising = run(BROKEN / "raises_in_reset.py")
    for check in raising.failures:
        assert check.evidence["kind"] == "exception" and check.evidence["seed"] == 0
        assert "scenario table missing for seed 0" in check.evidence["error"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_envs_pass_every_required_check(path: Path, shop_tools: list[dict[str, Any]]) -> None:
    report = run(path, shop_tools)
    assert report.passed, [(c.name, c.summary) for c in report.failures]
    assert report.check("fidelity").evidence["shared_tools"], "examples mimic shop tools"
    graded = report.check("graded").evidence
    assert len(graded["distinct_rewards"]) >= 3


def _accepted_recordings() -> list[Path]:
    """The recorded generator answers the recorded reviewer accepts (the last attempt of each capability)."""
    import yaml

    root = RECORDINGS_DIR
    rec = yaml.safe_load((root / "shop.yaml").read_text())
    return [
        root / rec["synthesis_generator"][cap][-1]["code_file"]
        for cap, verdicts in rec["synthesis_reviewer"].items()
        if verdicts[-1]["verdict"] == "accept"
    ]


@pytest.mark.parametrize("path", _accepted_recordings(), ids=lambda p: p.stem)
def test_accepted_recorded_envs_pass_every_required_check(path: Path, shop_tools: list[dict[str, Any]]) -> None:
    """What the demo's recorded generator finally answers must pass the self-test the demo runs on it."""
    report = run(path, shop_tools)
    assert report.passed, [(c.name, c.summary) for c in report.failures]
    assert len(report.check("graded").evidence["distinct_rewards"]) >= 3


def test_module_that_does_not_load_blocks_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "syntax.py"
    path.write_text("from envs.sdk import SyntheticEnv\nclass Env(SyntheticEnv)\n    pass\n")
    report = run(path)
    assert report.check("loads").evidence["kind"] == "load_error"
    assert report.failed_names() == set(CHECKS) - {
        "grpo_ready",
        "fidelity",
        "result_format",
        "contamination",
    }  # no target, no split: SKIP
    assert report.check("fidelity").verdict == "SKIP" and report.check("result_format").verdict == "SKIP"
    text = generator_text(report)
    assert "check `loads` FAILED" in text and "SyntaxError" in text
    assert "check `solvable`" not in text and "check `deterministic`" not in text  # blocked checks are left out


class PoisonedAfterFault:
    """A trusted env that times out the first time it scores a do-nothing episode, and that
    instance is dead for good (like a sandbox killed after a timeout): the checks after the
    fault only pass if they open a fresh env."""

    opened = 0
    faulted = False

    def __init__(self) -> None:
        type(self).opened += 1
        self.inner = InProcessSyntheticEnv(BROKEN / "baseline_ok.py")
        self.name, self.dead, self.tool_calls = "poisoned", False, 0

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def _alive(self) -> None:
        if self.dead:
            raise EnvCodeError("crash", "the sandbox is gone")

    def tools(self) -> list[dict[str, Any]]:
        self._alive()
        return self.inner.tools()

    def reset(self, task: int) -> Any:
        self._alive()
        self.tool_calls = 0
        return self.inner.reset(task)

    def step(self, message: Any) -> Any:
        self._alive()
        self.tool_calls += len(message.tool_calls)
        return self.inner.step(message)

    def score(self) -> Any:
        self._alive()
        if self.tool_calls == 0 and not PoisonedAfterFault.faulted:
            self.dead = PoisonedAfterFault.faulted = True
            raise EnvCodeError("timeout", "score() did not answer within 3.0 s", method="score")
        return self.inner.score()

    def solution(self, seed: int) -> Any:
        self._alive()
        return self.inner.solution(seed)


def test_env_failure_is_a_failed_check_and_later_checks_use_a_fresh_env() -> None:
    PoisonedAfterFault.opened, PoisonedAfterFault.faulted = 0, False
    report = asyncio.run(validate_env(PoisonedAfterFault, seeds=10))
    assert report.failed_names() == {"not_trivial"}
    ev = report.check("not_trivial").evidence
    assert ev == {"seed": 0, "phase": "score", "kind": "timeout", "error": "score() did not answer within 3.0 s"}
    assert report.check("graded").passed  # ran after the fault, on a fresh env
    assert PoisonedAfterFault.opened >= 3  # first env, determinism's fresh env, the one after the fault


def test_thresholds_are_configurable_and_checked() -> None:
    strict = SelfTestThresholds(trivial_mean=0.0)
    report = run(BROKEN / "baseline_ok.py", thresholds=strict)
    assert report.failed_names() == {"not_trivial"}  # mean 0 is not < 0
    with pytest.raises(ValueError, match="graded_fractions"):
        SelfTestThresholds(graded_fractions=[0.5, 0.25])
    with pytest.raises(ValueError, match="seeds must be >= 2"):
        asyncio.run(validate_env(lambda: InProcessSyntheticEnv(BROKEN / "baseline_ok.py"), seeds=1))


def test_report_json_carries_verdicts() -> None:
    report = run(BROKEN / "constant_reward.py")
    data = report.to_json()
    assert data["passed"] is False
    verdicts = {c["name"]: c["verdict"] for c in data["checks"]}
    assert verdicts["graded"] == "FAIL" and verdicts["solvable"] == "PASS" and verdicts["grpo_ready"] == "SKIP"
    assert ValidationReport.model_validate(
        {k: v for k, v in data.items() if k != "passed"}
        | {"checks": [{k: v for k, v in c.items() if k != "verdict"} for c in data["checks"]]}
    ).failed_names() == {"not_trivial", "graded", "reward_hacking"}


def test_the_accepted_precondition_env_pays_the_one_rule_not_a_list_of_every_rule() -> None:
    """A refusal after the check that names every rule ('shipped, processed, delivered, 30, final sale or available')
    would contain the right one by construction: it earns the check and the refusal, never the reason."""
    from gapforge.envs.sdk import action_to_message
    from gapforge.envs.synthetic import load_env_class

    cls = load_env_class(str(RECORDINGS_DIR / "shop" / "precondition_verification_3.py"))
    ineligible, kinds = 0, set()
    for seed in range(60):
        env = cls()
        env.reset(seed)
        truth = env.scenario["truth"]
        if truth["eligible"]:
            continue
        ineligible += 1
        kinds.add(truth["why"])
        checks = [a for a in env.solution(seed) if a.get("tool")]
        scores = {}
        said = {
            "one": f"I'm sorry, I cannot do that: it is {truth['why']}.",
            "worded": {
                "shipped": "Unfortunately it has already shipped, so a new address is not available.",
                "processed": "I can't: the order is processed, changing it is unavailable now.",
                "delivered": f"I'm unable to cancel order {truth['order_id']}: it was delivered on 2025-05-30.",
                "30": "Unfortunately, returns are only available within 30 days of delivery.",
                "final sale": "I'm sorry, returns are not available for final sale items.",
                "available": "Unfortunately that variant is not available.",
            }[truth["why"]],
            "list": "I'm sorry, I cannot do that: it is shipped, processed, delivered, 30, final sale or available.",
        }
        for name, text in said.items():
            play = cls()
            play.reset(seed)
            for i, act in enumerate([*checks, {"say": text}]):
                if play.step(action_to_message(act, f"c{i}"))["done"]:
                    break
            scores[name] = play.score()
        assert scores["one"]["reward"] == 1.0 and scores["worded"]["reward"] == 1.0, (seed, truth, scores)
        assert scores["list"]["components"]["informed"] == 0.0 and scores["list"]["reward"] == 0.8, (
            seed,
            truth,
            scores["list"],
        )
    assert ineligible >= 20 and len(kinds) == 6, kinds  # every rule


def test_the_accepted_precondition_env_ranks_refusing_an_allowed_request_below_acting_on_it() -> None:
    """Looking the order up and then refusing what it allows must not beat the allowed write made without the
    look (else GRPO's cheapest path to the lookup's credit is to look and refuse everything, and the adapter
    refuses the target's allowed address changes); the reference scores 1, a forbidden request promised after
    the look keeps part of the look's credit, and promising without looking earns nothing."""
    from gapforge.envs.sdk import action_to_message
    from gapforge.envs.synthetic import load_env_class

    cls = load_env_class(str(RECORDINGS_DIR / "shop" / "precondition_verification_3.py"))
    look = ("get_order_details", "get_product_details")

    def play(seed: int, acts: list[dict]) -> float:
        env = cls()
        env.reset(seed)
        for i, act in enumerate(acts):
            if env.step(action_to_message(act, f"c{i}"))["done"]:
                break
        return env.score()["reward"]

    seen = {True: 0, False: 0}
    for seed in range(40):
        env = cls()
        env.reset(seed)
        truth, sol = env.scenario["truth"], env.solution(seed)
        looked = [a for a in sol if a.get("tool") in look]
        head = sol[: sol.index(looked[0])]  # ask, identify, ask for the facts
        refuse = {"say": f"I'm sorry, I cannot do that: it is {truth['why'] or 'processed'}."}
        promise = {"say": "Sure, I have taken care of that for you. You are all set."}
        seen[truth["eligible"]] += 1
        assert play(seed, sol) == 1.0, (seed, truth)
        if truth["eligible"]:
            unlooked = head + [a for a in sol[len(head) :] if a.get("tool") not in look]  # confirm, write, done
            assert play(seed, head + looked + [refuse]) < play(seed, unlooked) < 1.0, (seed, truth)
        else:
            assert (
                0.0
                == play(seed, head + [promise])
                < play(seed, head + looked + [promise])
                < play(seed, head + looked + [refuse])
            ), (seed, truth)
    assert min(seen.values()) >= 10
