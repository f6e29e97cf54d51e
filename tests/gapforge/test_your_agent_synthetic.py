"""The hand-written synthetic env of docs/your-agent.md (examples/my_agent_synthetic_env.py) passes every required check
of the self-test against its target, examples/my_agent_env.py:BillingEnv, and its reward tells the capability apart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gapforge.envs.registry import make_env
from gapforge.envs.sdk import action_to_message
from gapforge.envs.synthetic import InProcessSyntheticEnv, load_env_class
from gapforge.sandbox.checks import validate_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODULE = EXAMPLES / "my_agent_synthetic_env.py"


def test_the_example_passes_the_self_test_against_the_billing_env() -> None:
    target = make_env(f"{EXAMPLES / 'my_agent_env.py'}:BillingEnv")
    report = asyncio.run(
        validate_env(lambda: InProcessSyntheticEnv(MODULE), target_tools=target.tools(), seeds=20, module=MODULE)
    )
    assert report.passed, [(c.name, c.summary) for c in report.failures]
    assert report.capability == "invoice_lookup"
    assert report.check("fidelity").evidence["shared_tools"] == ["get_invoice", "refund_invoice", "change_plan"]
    assert len(report.check("graded").evidence["distinct_rewards"]) >= 3


def test_an_answer_without_the_lookup_loses_its_point() -> None:
    env = load_env_class(MODULE)()
    seed = next(s for s in range(50) if env.scenario_for(s)["truth"]["kind"] == "amount")
    actions = env.solution(seed)
    for skip_lookup, expected in ((False, 1.0), (True, 2 / 3)):
        env.reset(seed)
        for i, action in enumerate(actions[1:] if skip_lookup else actions):
            env.step(action_to_message(action, f"call_{i}"))
        assert abs(env.score()["reward"] - expected) < 1e-9
