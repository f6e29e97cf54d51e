"""Composite targets (`composite:A+B`) and τ²'s step cap as a spec option (`tau2:retail?max_steps=50`)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from gapforge.agents.analysis.split import split_tasks
from gapforge.agents.episode import run_episode
from gapforge.envs.composite import CompositeEnv, parse_composite, part_prefix
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, TargetEnvironment, ToolCall
from gapforge.envs.registry import is_builtin, make_env
from gapforge.envs.target_check import fingerprint

ROOT = Path(__file__).resolve().parents[2]
BILLING = f"{ROOT}/examples/my_agent_env.py:BillingEnv"
SHOP_AND_BILLING = f"composite:shop+{BILLING}"


def test_tasks_are_merged_and_prefixed_by_their_env() -> None:
    shop, billing = make_env("shop"), make_env(BILLING)
    env = make_env(SHOP_AND_BILLING)
    assert isinstance(env, TargetEnvironment) and is_builtin(SHOP_AND_BILLING) and env.name == SHOP_AND_BILLING
    assert env.task_ids() == [f"shop/{t}" for t in shop.task_ids()] + [f"BillingEnv/{t}" for t in billing.task_ids()]
    assert env.task_family("BillingEnv/refund-002") == "BillingEnv/refusal"
    assert env.task_family(f"shop/{shop.task_ids()[0]}") == f"shop/{shop.task_family(shop.task_ids()[0])}"
    assert env.part_of("BillingEnv/plan-001") == BILLING  # type: ignore[attr-defined]


def test_a_task_is_played_in_its_own_env() -> None:
    env = make_env(SHOP_AND_BILLING)
    opening = env.reset("BillingEnv/refund-001")
    assert opening[0].content is not None and opening[0].content.startswith("You are Acme billing support")
    assert {t["function"]["name"] for t in env.tools()} == {
        "get_invoice",
        "refund_invoice",
        "change_plan",
    }  # the part's own tools
    env.step(
        Message.assistant(tool_calls=[ToolCall(id="c1", name="refund_invoice", arguments={"invoice_id": "INV-7"})])
    )
    score = env.score()
    assert score.success and score.info["composite_part"] == BILLING
    shop_task = next(t for t in env.task_ids() if t.startswith("shop/"))
    env.reset(shop_task)  # the next episode on the same instance: the shop's tools, the shop's score
    assert "refund_invoice" not in {t["function"]["name"] for t in env.tools()}
    assert env.score().info["composite_part"] == "shop"
    env.close()


def test_the_policy_loop_plays_a_prefixed_task_to_its_score() -> None:
    class RefundAndThank:
        name = "refund-and-thank"

        def __init__(self) -> None:
            self.turn = 0

        async def respond(self, messages, tools, *, temperature=None):  # noqa: ANN001, ANN202 - the PolicyModel protocol
            self.turn += 1
            if self.turn == 1:
                return Message.assistant(
                    tool_calls=[ToolCall(id="c1", name="refund_invoice", arguments={"invoice_id": "INV-7"})]
                )
            return Message.assistant("Refunded.")

    episode = asyncio.run(
        run_episode(RefundAndThank(), make_env(SHOP_AND_BILLING), "BillingEnv/refund-001", max_turns=5)
    )
    assert episode.success and episode.reward == 1.0 and episode.turns == 3


def test_the_analysis_split_stays_per_family_and_deterministic() -> None:
    env = make_env(SHOP_AND_BILLING)
    families = {t: env.task_family(t) for t in env.task_ids()}
    a, b = split_tasks(families, 0.5, seed=0), split_tasks(families, 0.5, seed=0)
    assert a == b
    shop_families = {f for f in families.values() if f.startswith("shop/")}
    assert (
        shop_families and {families[t] for t in a.analysis if t.startswith("shop/")} == shop_families
    )  # every family analysed


def _tool_env(path: Path, description: str) -> str:
    path.write_text(
        textwrap.dedent(f"""
        from gapforge.protocol import Message, Score, StepResult, tool_schema

        class Env:
            def task_ids(self): return ["t1"]
            def task_family(self, task_id): return "only"
            def tools(self): return [tool_schema("lookup", {description!r}, {{"id": {{"type": "string"}}}})]
            def reset(self, task): return [Message.system("p"), Message.user("hi")]
            def step(self, message): return StepResult(done=True)
            def score(self): return Score(reward=0.0, success=False)
            def close(self): pass
    """)
    )
    return f"{path}:Env"


def test_the_fingerprint_covers_every_part(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _tool_env(tmp_path / "a" / "first.py", "look up, first")
    second = _tool_env(tmp_path / "b" / "second.py", "look up, second")
    spec = f"composite:one={first}+two={second}"  # both classes are named Env: the parts are named
    before = fingerprint(make_env(spec), spec, user_class=False)
    assert before.tasks == 2 and before.tool_names == ["lookup", "lookup"]
    assert len(make_env(spec).tools()) == 1  # the union by name, before any reset: the first part's schema stands
    _tool_env(tmp_path / "b" / "second.py", "look up, changed")  # the second part's schema of the shared name changes
    after = fingerprint(make_env(spec), spec, user_class=False)
    assert after.tools_sha256 != before.tools_sha256 and after.tasks_sha256 == before.tasks_sha256


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("composite:shop", r"a composite joins two or more env specs with '\+'"),
        ("composite:shop+", r"a composite joins two or more env specs"),
        ("composite:shop+shop", r"parts 'shop' and 'shop' would both prefix their task ids with 'shop/': name them"),
        ("composite:shop+composite:shop+tau2:retail", r"part 'composite:shop' is itself a composite"),
        (
            "composite:shop+tau2:nowhere",
            r"composite env 'composite:shop\+tau2:nowhere', part 'tau2:nowhere': unknown τ²-bench domain 'nowhere'",
        ),
        (
            "composite:shop+no/such/file.py:Env",
            r"part 'no/such/file.py:Env': env 'no/such/file.py:Env': file 'no/such/file.py' not found",
        ),
    ],
)
def test_a_bad_part_is_one_line_naming_it(spec: str, pattern: str) -> None:
    with pytest.raises(EnvError, match=pattern) as err:
        make_env(spec)
    assert "\n" not in str(err.value)


def test_an_unknown_or_unprefixed_task_id_names_the_prefixes() -> None:
    env = make_env(SHOP_AND_BILLING)
    with pytest.raises(EnvError, match=r"unknown task id 'refund-001' .*start with shop/, BillingEnv/"):
        env.reset("refund-001")
    with pytest.raises(EnvError, match=r"call reset\(task\) before"):
        CompositeEnv(SHOP_AND_BILLING, make=make_env).score()


def test_part_prefixes() -> None:
    assert [p for p, _ in parse_composite("composite:tau2:airline?max_steps=50+tau2:retail?max_steps=50")] == [
        "airline",
        "retail",
    ]
    assert parse_composite("composite:a=x.py:Env+b=tau2:retail?max_steps=5") == [
        ("a", "x.py:Env"),
        ("b", "tau2:retail?max_steps=5"),
    ]
    assert part_prefix("shop") == "shop" and part_prefix("mcp:examples/helpdesk/target.yaml") == "target"
    assert part_prefix("toolsandbox:state_dependency?network=stand-in") == "state_dependency"


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        (
            "tau2:retail?max_steps=0",
            r"bad option max_steps=0 in env 'tau2:retail\?max_steps=0': τ² takes max_steps=N and max_errors=N",
        ),
        ("tau2:retail?max_stepz=50", r"bad option max_stepz=50"),
        ("tau2:retail?max_steps=fifty", r"bad option max_steps='fifty'"),
    ],
)
def test_bad_tau2_options_are_one_line(spec: str, pattern: str) -> None:
    with pytest.raises(EnvError, match=pattern) as err:
        make_env(spec)
    assert "\n" not in str(err.value)


@pytest.mark.tau2
def test_tau2_max_steps_option_caps_the_episode() -> None:
    pytest.importorskip("tau2")
    env = make_env("tau2:retail?max_steps=3")
    assert env.name == "tau2:retail?max_steps=3" and env.max_turns == 3  # type: ignore[attr-defined]
    task = env.task("0")  # type: ignore[attr-defined]
    call = next(a for a in task.evaluation_criteria.actions if a.requestor == "assistant")
    env.reset("0")  # the user's first turn is step 1; the call and its result are steps 2 and 3: the cap
    result = env.step(Message.assistant(tool_calls=[ToolCall(id="c1", name=call.name, arguments=call.arguments)]))
    assert result.done and result.info["termination"] == "max_steps"
    score = env.score()
    assert score.reward == 0.0 and score.info["termination_reason"] == "max_steps" and score.info["steps"] == 3


@pytest.mark.tau2
def test_the_paper_target_airline_and_retail_as_one() -> None:
    pytest.importorskip("tau2")
    env = make_env("composite:tau2:airline?max_steps=50+tau2:retail?max_steps=50")
    ids = env.task_ids()
    assert len(ids) == 50 + 114 and ids[0] == "airline/0" and "retail/113" in ids
    assert env.max_turns == 50  # type: ignore[attr-defined]
    assert env.task_family("retail/0").startswith("retail/") and env.task_family("airline/0").startswith("airline/")
    opening = env.reset("airline/0")
    assert "airline" in (opening[0].content or "").lower()
    assert {"book_reservation"} <= {t["function"]["name"] for t in env.tools()}
