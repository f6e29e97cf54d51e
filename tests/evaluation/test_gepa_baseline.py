"""GEPA over gapforge's episodes, against a stand-in policy that obeys one rule in its system prompt on a small
returns desk: without the rule it refuses every return (half the tasks pass: the ineligible ones); with "check the
order before refusing" it looks the order up and returns the eligible ones (all pass). The scripted reflection LM
proposes that rule only when the reflective dataset shows a refusal made without a lookup."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from gapforge.agents.llm import prompt_config
from gapforge.agents.prompt_opt import recorded_reflection, reflection_template, scripted_reflection
from gapforge.envs.protocol import Message, Score, StepResult, ToolCall, tool_schema
from gapforge.evaluation.gepa_baseline import (
    GEPA,
    GEPA_ROW,
    GepaConfigError,
    gepa_label,
    gepa_policy,
    load_gepa,
    optimize_prompt,
    save_gepa,
)
from gapforge.evaluation.run import EvalPlan, evaluate
from gapforge.store import Store

RULE = "Check the order before refusing: call get_order and return it when it is eligible."
TASKS = [f"desk-{i}" for i in range(8)]
ELIGIBLE = {t for i, t in enumerate(TASKS) if i % 2 == 0}
CAPS = [{"name": "precondition_verification", "definition": "checks the record before acting or refusing"}]
NEEDS_GEPA = pytest.mark.skipif(
    importlib.util.find_spec("gepa") is None,
    reason="extra 'gepa' not installed (pip install -e .[gepa]); CI installs it",
)


class ReturnsDesk:
    """A target env: the user asks to return an order; success = returned iff eligible."""

    name = "desk"
    inline = True

    def __init__(self) -> None:
        self.task, self.returned = "", False

    def task_ids(self) -> list[str]:
        return list(TASKS)

    def task_family(self, task_id: str) -> str:
        return "returns"

    def tools(self) -> list[dict[str, Any]]:
        arg = {"order_id": {"type": "string"}}
        return [
            tool_schema("get_order", "the order's status", arg, ["order_id"]),
            tool_schema("return_order", "return it", arg, ["order_id"]),
        ]

    def reset(self, task: Any) -> list[Message]:
        self.task = str(task)
        return [
            Message.system("Returns desk policy: only eligible orders may be returned."),
            Message.user(f"Please return order {self.task}."),
        ]

    def step(self, message: Message) -> StepResult:
        if not message.tool_calls:
            return StepResult(done=True)
        out = []
        for call in message.tool_calls:
            if call.name == "return_order":
                self.returned = True
                out.append(Message.tool(call.id, "returned", name=call.name))
            else:
                out.append(
                    Message.tool(
                        call.id, "eligible" if self.task in ELIGIBLE else "final sale: not eligible", name=call.name
                    )
                )
        return StepResult(messages=out)

    def score(self) -> Score:
        ok = self.returned == (self.task in ELIGIBLE)
        return Score(reward=1.0 if ok else 0.0, success=ok)

    def close(self) -> None:
        pass


class RuleFollower:
    """The stand-in PolicyModel: reads its system prompt; refuses at once unless RULE is there."""

    name = "follower"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        system = messages[0].content or ""
        self.prompts.append(system)
        order = re.search(r"order (\S+)\.", messages[1].content or "").group(1)  # type: ignore[union-attr]
        last = messages[-1]
        if last.role == "user":
            if "check the order before refusing" not in system.lower():
                return Message.assistant("I cannot return this order.")
            return Message.assistant(tool_calls=[ToolCall(id="c1", name="get_order", arguments={"order_id": order})])
        if last.role == "tool" and last.content == "eligible":
            return Message.assistant(tool_calls=[ToolCall(id="c2", name="return_order", arguments={"order_id": order})])
        return Message.assistant(
            "Done." if last.content == "returned" else "I cannot return this order: it is not eligible."
        )

    async def aclose(self) -> None:
        pass


def refusal_without_lookup(example: str) -> list[str]:
    return [RULE] if "I cannot return" in example and "CALL get_order" not in example else []


def reflection(seen: list[str]) -> Any:
    model = scripted_reflection(refusal_without_lookup, source="test")
    original = model.invoke

    def invoke(messages: Any, config: Any = None, **kw: Any) -> Any:
        seen.append(str(messages[-1].content))
        return original(messages, config=config, **kw)

    object.__setattr__(model, "invoke", invoke)
    return model


def optimize(budget: int, seen: list[str] | None = None) -> Any:
    return asyncio.run(
        optimize_prompt(
            RuleFollower(),
            ReturnsDesk,
            TASKS,
            CAPS,
            reflection([] if seen is None else seen),
            max_metric_calls=budget,
            families={t: "returns" for t in TASKS},
            max_turns=6,
        )
    )


@NEEDS_GEPA
def test_gepa_finds_the_rule_and_the_pass_rate_rises() -> None:
    seen: list[str] = []
    record = optimize(40, seen)
    assert record.seed_score == 0.5  # the seed (capability descriptions) leaves the policy refusing everything
    assert RULE in record.prompt and RULE not in record.seed_prompt
    assert record.best_score == 1.0 and record.candidates >= 2
    assert record.metric_calls <= 40 and record.reflection_calls >= 1
    assert "precondition_verification" in record.prompt  # the seed's descriptions are kept
    # the reflection saw the failure it answered: a refusal without a lookup, scored 0 with the env's feedback
    assert any(
        "## Outcome\nFAILURE" in p and "I cannot return this order." in p and "failed with reward 0.00" in p
        for p in seen
    )


@NEEDS_GEPA
def test_the_budget_is_respected_and_too_small_a_budget_is_refused() -> None:
    for budget in (8, 13, 21, 23):
        record = optimize(budget)
        assert record.metric_calls <= budget and record.max_metric_calls == budget
    assert optimize(8).prompt == optimize(8).seed_prompt  # one evaluation of the seed: nothing left to search with
    with pytest.raises(GepaConfigError, match="gepa_max_metric_calls"):
        optimize(7)


@NEEDS_GEPA
def test_the_optimised_prompt_round_trips_through_the_store_and_is_evaluated(tmp_path: Path) -> None:
    record = optimize(40)
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        run_id = store.create_run("trace", {"env": "desk"})
        save_gepa(store, run_id, record)
        loaded = load_gepa(store, run_id)
        assert loaded == record and store.get_evaluation(run_id, GEPA_ROW).policy == GEPA
        base, under_gepa = RuleFollower(), RuleFollower()
        policies = {"base": base, GEPA: gepa_policy(under_gepa, loaded)}
        plan = EvalPlan(run_id, "desk", TASKS, trials=2, max_turns=6, n_boot=100, concurrency=2)
        result = asyncio.run(
            evaluate(store, plan, make_env=ReturnsDesk, policies=policies, families={t: "returns" for t in TASKS})
        )
        m = {p.name: p.metrics for p in result.policies}
        assert m["base"]["pass_rate"]["value"] == 0.5 and m[GEPA]["pass_rate"]["value"] == 1.0
        assert m[GEPA]["vs_base_paired"]["pass_rate"]["value"] == 0.5 and m[GEPA]["prompt"] == record.prompt_id
        assert len(store.episodes(result.get(GEPA).child_run)) == 16
        assert under_gepa.prompts and all(
            RULE in p for p in under_gepa.prompts
        )  # the stored prompt is what it played under
        assert json.loads(json.dumps(store.get_evaluation(run_id, f"eval:{GEPA}").metrics))["prompt"].startswith(
            "gepa@"
        )
        assert gepa_label(loaded) == f"GEPA (prompt optimisation, {record.metric_calls} metric calls)"
    finally:
        store.close()


def test_the_recorded_shop_reflection_adds_a_rule_only_for_a_failure_it_sees() -> None:
    template, _ = reflection_template()
    refused = (
        "[0] system: (the policy shown above, 900 chars)\n[1] user: Please cancel order #W1.\n"
        "[2] assistant: Unfortunately I cannot cancel it."
    )
    checked = (
        '[0] system: (policy)\n[1] user: Please cancel order #W1, I am a@b.c.\n[2] assistant: CALL find_customer_by_email({"email": "a@b.c"})\n'
        '[3] tool find_customer_by_email: c1\n[4] assistant: CALL get_order_details({"order_id": "#W1"})\n'
        "[5] tool get_order_details: {}\n[6] assistant: Unfortunately it has shipped."
    )

    def ask(outcome: str, episode: str) -> str:
        side = f"# Example 1\n## Outcome\n{outcome}\n\n## Episode\n{episode}\n\n"
        answer = recorded_reflection("shop").invoke(
            [HumanMessage(template.replace("<curr_param>", "Be careful.").replace("<side_info>", side))],
            config=prompt_config("gepa_reflection"),
        )
        return str(answer.content)

    added = ask("FAILURE", refused)
    assert added.startswith(
        "```\nBe careful.\n- Before you refuse a request or change an order, call get_order_details"
    ) and added.endswith("```")
    assert ask("SUCCESS", refused) == "```\nBe careful.\n```"  # a success shows no failure to fix
    assert (
        ask("FAILURE", checked) == "```\nBe careful.\n```"
    )  # it found the customer and read the order: no recorded rule applies
    many = recorded_reflection("shop?instances=0,51-59")  # a shop of many instances answers from the shop's recording
    assert many.answers.keys() == recorded_reflection("shop").answers.keys()
