"""Pieces of the self-test: tool-schema validation and fidelity, schema-valid random
arguments, corruption plans, and the GRPO-readiness check with policies we own."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from gapforge.agents.policy import run_episode
from gapforge.config import GRPOReadinessConfig
from gapforge.envs.protocol import Message, ToolCall, tool_schema
from gapforge.envs.synthetic import InProcessSyntheticEnv
from gapforge.sandbox.checks import validate_env
from gapforge.sandbox.checks.adversarial import corrupt, corruption_plan
from gapforge.sandbox.checks.behaviour import check_diverse
from gapforge.sandbox.checks.grpo import grade_groups
from gapforge.sandbox.checks.probe import Probe
from gapforge.sandbox.checks.schemas import fidelity_problems, random_args, schema_problems
from gapforge.sandbox.checks.settings import SelfTestThresholds

BROKEN = Path(__file__).parent / "broken"
BASELINE = BROKEN / "baseline_ok.py"


def test_schema_problems_name_what_is_wrong() -> None:
    good = tool_schema("get_order_details", "Get an order.", {"order_id": {"type": "string"}})
    assert schema_problems([good]) == []
    assert schema_problems([]) == ["tools() must return a non-empty list of schemas, got list []"]
    bad_name = tool_schema("get order", "x", {})
    assert "must match" in schema_problems([bad_name])[0]
    assert schema_problems([good, good]) == ["tool 'get_order_details': name used twice"]
    missing_req = tool_schema("f", "x", {"a": {"type": "string"}}, required=["a", "b"])
    assert schema_problems([missing_req]) == ["tool 'f': required parameter 'b' is not in properties"]
    bad_type = tool_schema("f", "x", {"a": {"type": "str"}})
    assert "unknown type 'str'" in schema_problems([bad_type])[0]
    assert "expected {'type': 'function'" in schema_problems([{"name": "f"}])[0]
    # local $ref items, as pydantic-generated schemas (tau2 airline's book_reservation) use, are valid
    ref_items = {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/Flight"}, {"type": "object"}]}}
    assert schema_problems([tool_schema("book", "b", {"flights": ref_items})]) == []
    remote = {"type": "array", "items": {"$ref": "https://example.com/flight.json"}}
    assert "local '#/...' reference" in schema_problems([tool_schema("book", "b", {"flights": remote})])[0]


def test_fidelity_compares_names_types_and_required() -> None:
    target = [tool_schema("cancel", "c", {"order_id": {"type": "string"}, "reason": {"type": "string", "enum": ["a"]}})]
    same = [tool_schema("cancel", "other words", {"order_id": {"type": "string"}, "reason": {"type": "string"}})]
    assert fidelity_problems(same, target) == (["cancel"], [])
    typed = [tool_schema("cancel", "c", {"order_id": {"type": "integer"}, "reason": {"type": "string"}})]
    assert fidelity_problems(typed, target)[1] == [
        "tool 'cancel': parameter 'order_id' has type 'integer', target has 'string'"
    ]
    optional = [
        tool_schema(
            "cancel", "c", {"order_id": {"type": "string"}, "reason": {"type": "string"}}, required=["order_id"]
        )
    ]
    assert "required ['order_id'] != target's ['order_id', 'reason']" in fidelity_problems(optional, target)[1][0]
    unrelated = [tool_schema("lookup", "l", {})]
    assert fidelity_problems(unrelated, target) == ([], [])


def test_random_arguments_are_accepted_by_the_sdk() -> None:
    """Random-tool calls must exercise the tools, not bounce off argument validation."""
    env = InProcessSyntheticEnv(Path(__file__).parents[2] / "envs" / "examples" / "precondition_verification.py")
    rng = random.Random(0)
    env.reset(0)
    for i in range(60):
        fn = rng.choice(env.tools())["function"]
        call = ToolCall(id=f"c{i}", name=fn["name"], arguments=random_args(fn["parameters"], rng, ["#W1", "x"]))
        result = env.step(Message.assistant(tool_calls=[call]))
        kinds = {e["kind"] for e in result.info.get("tool_errors", [])}
        assert "bad_arguments" not in kinds, (call, result.info)
        if result.done:
            env.reset(i)


def test_corruption_levels_are_nested_and_seeded() -> None:
    # no alteration can equal another action
    actions = [
        {"tool": "a", "arguments": {"x": "1"}},
        {"tool": "b", "arguments": {}},
        {"say": "done"},
        {"tool": "a", "arguments": {"x": "2", "y": 1}},
    ]
    tools = {
        "a": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}},
        "b": {"name": "b", "parameters": {}},
    }
    plan = corruption_plan(actions, 7, tools)
    assert plan == corruption_plan(actions, 7, tools)
    assert sorted(i for i, _ in plan) == [0, 1, 2, 3]
    previous = actions
    for k in range(1, 5):
        now = corrupt(actions, plan, k)
        assert now != actions
        kept = [a for a in now if a in actions]
        assert len(kept) == 4 - k  # exactly k actions dropped or altered
        assert all(a in previous for a in kept)  # nested: level k keeps a subset of level k-1
        previous = now


class CoinPolicy:
    """At temperature 1.0 looks the order up half the time, then reports its status; else gives up."""

    name = "coin"

    def __init__(self, seed: int, p_lookup: float = 0.5) -> None:
        self.rng, self.p = random.Random(seed), p_lookup

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        assert temperature == 1.0
        last = messages[-1]
        if last.role == "tool":
            status = json.loads(last.content or "{}").get("status", "unknown")
            return Message.assistant(f"Your order is {status}.")
        order = re.search(r"#W\d+", messages[1].content or "")
        if order and self.rng.random() < self.p:
            return Message.assistant(
                tool_calls=[ToolCall(id="c1", name="get_order_details", arguments={"order_id": order.group()})]
            )
        return Message.assistant("Sorry, I cannot help.")


async def _runner(policy: Any, env: Any, seed: int, temperature: float) -> Any:
    return await run_episode(policy, env, seed, max_turns=5, temperature=temperature)


def test_grpo_ready_passes_with_a_mixed_policy_and_fails_with_a_hopeless_one() -> None:
    cfg = GRPOReadinessConfig(groups=6, samples=4)
    ok = asyncio.run(
        validate_env(
            lambda: InProcessSyntheticEnv(BASELINE), seeds=6, policy=CoinPolicy(1), run_episode=_runner, readiness=cfg
        )
    )
    check = ok.check("grpo_ready")
    assert check.required and check.passed, check.summary
    assert check.evidence["groups"] == 6 and check.evidence["samples"] == 4
    assert check.evidence["informative_share"] >= 0.5 and 0.15 <= check.evidence["mean_reward"] <= 0.85

    hopeless = asyncio.run(
        validate_env(
            lambda: InProcessSyntheticEnv(BASELINE),
            seeds=6,
            policy=CoinPolicy(1, p_lookup=0.0),
            run_episode=_runner,
            readiness=cfg,
        )
    )
    check = hopeless.check("grpo_ready")
    assert not check.passed and hopeless.failed_names() == {"grpo_ready"}
    assert check.evidence["all_zero_share"] == 1.0 and check.evidence["informative_share"] == 0.0
    assert "all-zero groups 100% > 20%" in check.summary
    assert check.summary.startswith("too hard for the policy") and check.evidence["difficulty"] == "too_hard"


def test_grpo_ready_reports_env_errors_inside_policy_episodes() -> None:
    cfg = GRPOReadinessConfig(groups=2, samples=2)
    report = asyncio.run(
        validate_env(
            lambda: InProcessSyntheticEnv(BROKEN / "raises_in_reset.py"),
            seeds=2,
            policy=CoinPolicy(0),
            run_episode=_runner,
            readiness=cfg,
        )
    )
    check = report.check("grpo_ready")
    assert not check.passed and "scenario table missing" in check.summary
    assert check.evidence["faults"][0]["kind"] == "env_error"


def test_grade_groups_thresholds() -> None:
    cfg = GRPOReadinessConfig()
    perfect = grade_groups({0: [1.0, 1.0], 1: [1.0, 1.0], 2: [0.0, 1.0]}, cfg)
    assert not perfect.passed and "all-perfect groups 67% > 20%" in perfect.summary
    assert "mean reward 0.833 outside [0.2, 0.8]" in perfect.summary  # the default window is [0.2, 0.8]
    assert perfect.summary.startswith("too easy") and perfect.evidence["difficulty"] == "too_easy"
    mixed = grade_groups({0: [0.0, 0.5], 1: [0.5, 1.0], 2: [0.2, 0.4]}, cfg)
    assert (
        mixed.passed
        and mixed.evidence["mean_reward"] == pytest.approx(0.4333, abs=1e-4)
        and mixed.evidence["difficulty"] == "ok"
    )
    flat = grade_groups({0: [0.5, 0.5], 1: [0.4, 0.4], 2: [0.2, 0.6]}, cfg)
    assert (
        not flat.passed
        and flat.summary.startswith("rewards do not vary within groups")
        and flat.evidence["difficulty"] == "flat"
    )
    low = grade_groups(
        {0: [0.0, 0.3], 1: [0.1, 0.2], 2: [0.0, 0.2]}, cfg
    )  # no all-zero group, but the mean is below the window
    assert (
        not low.passed
        and low.evidence["difficulty"] == "too_hard"
        and "mean reward 0.133 outside [0.2, 0.8]" in low.summary
    )


def test_grpo_ready_samples_at_the_configured_training_temperature() -> None:
    seen: list[float] = []

    async def recording(policy: Any, env: Any, seed: int, temperature: float) -> Any:
        seen.append(temperature)
        return await _runner(policy, env, seed, temperature)

    cfg = GRPOReadinessConfig(groups=2, samples=2).with_temperature(0.7)
    asyncio.run(
        validate_env(
            lambda: InProcessSyntheticEnv(BASELINE), seeds=2, policy=CoinPolicy(1), run_episode=recording, readiness=cfg
        )
    )
    assert seen and set(seen) == {0.7}


def test_diverse_counts_scenarios_not_openings(tmp_path: Path) -> None:
    """Shop customers often open with the same words; the seed must still change what the agent meets."""
    body = '''
from envs.sdk import SyntheticEnv, tool

class Env(SyntheticEnv):
    capability = "lookup"
    description = "look an order up"
    target = "shop"
    policy = "Answer with the order's status."

    def generate(self, seed):
        status = {SCENARIO}
        return {"opening": "Hi, where is my order #W1?", "db": {"status": status}}

    @tool
    def get_order_details(self, order_id: str) -> dict:
        """Get an order."""
        return {"order_id": order_id, "status": self.db["status"]}

    def reward(self):
        said = " ".join(s["text"] for s in self.said)
        return {"looked_up": float(self.called("get_order_details")), "answered": float(self.db["status"] in said)}

    def solution(self, seed):
        return [{"tool": "get_order_details", "arguments": {"order_id": "#W1"}}, {"say": "It is " + self.db["status"] + "."}]
'''
    varied, constant = tmp_path / "varied.py", tmp_path / "constant.py"
    varied.write_text(
        body.replace(
            "{SCENARIO}", 'self.rng.choice(["pending", "shipped", "delivered", "processed", "cancelled"]) + str(seed)'
        )
    )
    constant.write_text(body.replace("{SCENARIO}", '"shipped"'))
    th = SelfTestThresholds(diverse_share=0.9)
    probe = Probe(lambda: InProcessSyntheticEnv(varied))
    assert check_diverse(probe, list(range(8)), th).passed  # one opening, eight scenarios
    probe.close()
    probe = Probe(lambda: InProcessSyntheticEnv(constant))
    result = check_diverse(probe, list(range(8)), th)
    probe.close()
    assert (
        not result.passed
        and result.evidence["distinct"] == 1
        and result.evidence["same_scenario_seeds"] == [list(range(8))]
    )
