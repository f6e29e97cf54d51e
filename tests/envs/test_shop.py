"""The built-in shop env: conformance, gold replay, do-nothing, dropped writes, scripted user, tool-enforced policy."""

from __future__ import annotations

import collections
import json

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, Score, TargetEnvironment, ToolCall
from gapforge.envs.registry import make_env
from gapforge.envs.shop import ShopEnv
from gapforge.envs.shop.data import build_db
from gapforge.envs.shop.env import _pristine
from gapforge.envs.shop.tasks import FAMILIES
from gapforge.envs.shop.tools import READ_TOOLS, WRITE_TOOLS, ShopTools
from gapforge.envs.shop.user import STOP
from tests.envs.conformance import check_conformance

ENV = ShopEnv()
ALL_TASKS = ENV.task_ids()
WRITE_TASKS = [t for t in ALL_TASKS if any(a.name in WRITE_TOOLS for a in ENV.task(t).gold_actions)]


def _call(env: ShopEnv, name: str, i: int = 0, **args: object) -> Message:
    result = env.step(Message.assistant(tool_calls=[ToolCall(id=f"call_{i}", name=name, arguments=dict(args))]))
    assert [m.tool_call_id for m in result.messages] == [f"call_{i}"]
    return result.messages[0]


def _replay(env: ShopEnv, task_id: str, skip: int | None = None, say_info: bool = True) -> Score:
    task = env.task(task_id)
    env.reset(task_id)
    for i, action in enumerate(task.gold_actions):
        if i != skip:
            _call(env, action.name, i, **action.arguments)
    if say_info:
        env.step(
            Message.assistant(
                "Here is what I found: " + "; ".join(task.required_info) + ". Unfortunately I cannot do more."
            )
        )
    return env.score()


def test_conformance() -> None:
    one_per_family = [next(t for t in ALL_TASKS if ENV.task_family(t) == f) for f in FAMILIES]
    check_conformance(lambda: make_env("shop"), one_per_family)


def test_catalogue_size_and_shape() -> None:
    families = collections.Counter(ENV.task_family(t) for t in ALL_TASKS)
    assert len(ALL_TASKS) >= 40 and set(families) == set(FAMILIES) and min(families.values()) >= 8
    names = {t["function"]["name"] for t in ENV.tools()}
    assert len(names) >= 8 and len(READ_TOOLS & names) >= 4 and len(WRITE_TOOLS & names) >= 4
    assert isinstance(ENV, TargetEnvironment)
    for tid in ALL_TASKS:
        task = ENV.task(tid)
        assert task.gold_actions and all(a.name in names for a in task.gold_actions)
        # every task can be failed by doing nothing: it needs a write or something said
        assert task.required_info or tid in WRITE_TASKS, tid


def test_data_and_task_ids_are_deterministic() -> None:
    assert build_db().state_hash() == build_db().state_hash()
    assert ShopEnv().task_ids() == ALL_TASKS
    assert ALL_TASKS[0] == "shop-lookup-001"


def test_episodes_never_share_db_state() -> None:
    """Envs share the pristine DB and gold hashes per process; writes must stay in their episode."""
    pristine = build_db().state_hash()
    task_id = WRITE_TASKS[0]
    first = ShopEnv()
    assert _replay(first, task_id).success
    assert first._db is not None and first._db.state_hash() != pristine
    second = ShopEnv()
    second.reset(task_id)
    assert second._db is not None and second._db.state_hash() == pristine
    assert second.score().components["db"] == 0.0
    first.reset(task_id)  # a reset of the same instance starts from the pristine DB too
    assert first._db is not None and first._db.state_hash() == pristine
    for tid in ALL_TASKS:  # every task's reads and writes leave the shared pristine DB untouched
        _replay(ShopEnv(), tid)
    assert _pristine().db.state_hash() == pristine


@pytest.mark.parametrize("task_id", ALL_TASKS)
def test_gold_replay_scores_one(task_id: str) -> None:
    env = ShopEnv()
    score = _replay(env, task_id)
    assert (score.reward, score.success, score.components) == (1.0, True, {"db": 1.0, "communicate": 1.0})


@pytest.mark.parametrize("task_id", ALL_TASKS)
def test_doing_nothing_scores_zero(task_id: str) -> None:
    env = ShopEnv()
    env.reset(task_id)
    result = env.step(Message.assistant("Hello! How can I help you today?"))
    assert result.messages and result.messages[0].role == "user"
    score = env.score()
    assert score.reward == 0.0 and score.success is False


@pytest.mark.parametrize("task_id", WRITE_TASKS)
def test_dropping_one_write_scores_zero(task_id: str) -> None:
    env = ShopEnv()
    writes = [i for i, a in enumerate(env.task(task_id).gold_actions) if a.name in WRITE_TOOLS]
    for skip in writes:
        score = _replay(env, task_id, skip=skip)
        assert score.reward == 0.0 and score.components["db"] == 0.0 and score.components["communicate"] == 1.0


def test_gold_actions_without_the_required_info_score_zero() -> None:
    with_info = [t for t in ALL_TASKS if ENV.task(t).required_info]
    assert len(with_info) >= 30
    for task_id in with_info[::5]:
        score = _replay(ShopEnv(), task_id, say_info=False)
        assert score.reward == 0.0 and score.components == {"db": 1.0, "communicate": 0.0}
        assert score.info["missing_info"] == ENV.task(task_id).required_info


def test_tool_results_are_json_and_bad_calls_are_error_messages() -> None:
    env = ShopEnv()
    tid = "shop-write-001"
    task = env.task(tid)
    env.reset(tid)
    email = task.gold_actions[0].arguments.get("email") or ""
    found = _call(env, "find_customer_by_email", email=email) if email else None
    if found is not None:
        assert "customer_id" in json.loads(found.content or "")
    assert _call(env, "get_order_details", 1, order_id="#W0000000").content.startswith("Error: order")
    assert _call(env, "get_product_details", 2, product_id=123).content.startswith("Error: bad arguments")  # type: ignore[arg-type]
    assert _call(env, "cancel_pending_order", 3, order_id="#W1").content.startswith("Error: bad arguments")
    assert _call(env, "no_such_tool", 4).content == "Error: unknown tool 'no_such_tool'"
    assert json.loads(_call(env, "list_products", 5).content or "")["Backpack"] == "prod_1003"


def _customer_with(db_status: str, k: int) -> tuple[str, str, dict]:
    db = build_db()
    c = list(db.customers.values())[k]
    order = next(db.orders[o] for o in c.orders if db.orders[o].status == db_status)
    return c.email, order.order_id, order.model_dump()


def test_policy_violations_are_refused_by_the_tools_and_leave_the_db_unchanged() -> None:
    env = ShopEnv()
    env.reset("shop-write-001")
    base = build_db().state_hash()
    email, pending, _ = _customer_with("pending", 0)
    _, delivered, delivered_order = _customer_with("delivered", 0)
    other_email, other_pending, _ = _customer_with("pending", 1)

    msg = _call(env, "cancel_pending_order", 0, order_id=pending, reason="no longer needed")
    assert msg.content and msg.content.startswith("Error: identity not verified")
    _call(env, "find_customer_by_email", 1, email=email)
    assert "only pending orders can be cancelled" in (
        _call(env, "cancel_pending_order", 2, order_id=delivered, reason="no longer needed").content or ""
    )
    assert "only delivered orders can be returned" in (
        _call(env, "return_delivered_order_items", 3, order_id=pending, item_ids=["1"], payment_method_id="x").content
        or ""
    )
    assert "does not belong" in (
        _call(env, "cancel_pending_order", 4, order_id=other_pending, reason="no longer needed").content or ""
    )
    db = build_db()
    customer = db.customers[delivered_order["customer_id"]]
    paid_with = delivered_order["payment_history"][0]["payment_method_id"]
    other_pm = next(p for p, m in customer.payment_methods.items() if p != paid_with and m.source != "gift_card")
    item = delivered_order["items"][0]
    refused = _call(
        env,
        "return_delivered_order_items",
        5,
        order_id=delivered,
        item_ids=[item["item_id"]],
        payment_method_id=other_pm,
    )
    assert "original payment method or a gift card" in (refused.content or "")
    item, sold_out = next(
        (it, v)
        for it in delivered_order["items"]
        for v in db.products[it["product_id"]].variants.values()
        if not v.available and v.item_id != it["item_id"]
    )
    refused = _call(
        env,
        "exchange_delivered_order_items",
        6,
        order_id=delivered,
        item_ids=[item["item_id"]],
        new_item_ids=[sold_out.item_id],
        payment_method_id=paid_with,
    )
    assert "is not available" in (refused.content or "")
    assert env._db is not None and env._db.state_hash() == base
    assert other_email != email


def test_scripted_user_reveals_facts_confirms_and_stops() -> None:
    env = ShopEnv()
    tid = "shop-write-001"  # cancel a pending order
    task = env.task(tid)
    first = env.reset(tid)[1].content
    assert first == task.user.opening
    reply = env.step(Message.assistant("Sure. Could you give me your email address?")).messages[0].content or ""
    assert task.gold_actions[0].arguments["email"] in reply
    reply = (
        env.step(Message.assistant("Thanks. Which order would you like to cancel, and for what reason?"))
        .messages[0]
        .content
        or ""
    )
    cancel = next(a for a in task.gold_actions if a.name == "cancel_pending_order")
    assert cancel.arguments["order_id"] in reply and cancel.arguments["reason"] in reply
    for i, action in enumerate(task.gold_actions):
        if action.name != "cancel_pending_order":
            _call(env, action.name, i, **action.arguments)
    confirm = env.step(Message.assistant(f"I will cancel {cancel.arguments['order_id']}. Shall I proceed?"))
    assert confirm.messages[0].content == "Yes, please go ahead." and not confirm.done
    _call(env, "cancel_pending_order", 9, **cancel.arguments)
    end = env.step(Message.assistant(f"Done: the order is cancelled and {task.required_info[0]} will be refunded."))
    assert end.done and STOP in (end.messages[0].content or "") and end.info["termination"] == "user_stop"
    assert env.score().reward == 1.0
    assert env.step(Message.assistant("Anything else?")).done  # stays done


def test_scripted_user_answers_only_what_is_asked() -> None:
    env = ShopEnv()
    tid = "shop-write-004"  # address change: the user knows a new address
    facts = env.task(tid).user.facts
    env.reset(tid)
    reply = env.step(Message.assistant("Could you give me your email address?")).messages[0].content
    assert reply == facts["email"]  # "email address" is not a question about the new address
    assert env.step(Message.assistant("What is the new shipping address?")).messages[0].content == facts["address"]
    assert env.step(Message.assistant("Let me look into it.")).messages[0].content == "Can you help me with that?"


def test_scripted_user_without_email_gives_name_and_zip() -> None:
    env = ShopEnv()
    tid = next(t for t in ALL_TASKS if env.task(t).gold_actions[0].name == "find_customer_by_name_zip")
    args = env.task(tid).gold_actions[0].arguments
    env.reset(tid)
    reply = env.step(Message.assistant("Please tell me your email.")).messages[0].content or ""
    assert "don't remember" in reply and args["zip"] in reply and args["last_name"] in reply


def test_scripted_user_waits_for_refusal_and_gives_up_after_max_turns() -> None:
    env = ShopEnv()
    tid = next(t for t in ALL_TASKS if env.task_family(t) == "policy_refusal")
    env.reset(tid)
    not_yet = env.step(Message.assistant(f"I see the order is {env.task(tid).required_info[0]}."))
    assert not not_yet.done
    assert env.step(Message.assistant("Unfortunately I cannot do that under our policy.")).done
    env.reset(tid)
    turns = [env.step(Message.assistant("Hmm.")) for _ in range(env.task(tid).user.max_turns + 1)]
    assert [t.done for t in turns] == [False] * env.task(tid).user.max_turns + [True]


def test_transfer_ends_the_episode() -> None:
    env = ShopEnv()
    env.reset("shop-lookup-001")
    result = env.step(
        Message.assistant(
            tool_calls=[ToolCall(id="t1", name="transfer_to_human_agents", arguments={"summary": "wants a human"})]
        )
    )
    assert (
        result.done
        and result.info["termination"] == "transfer"
        and "Transfer successful" in (result.messages[0].content or "")
    )


def test_unknown_task_and_bad_usage_are_one_line_env_errors() -> None:
    env = ShopEnv()
    with pytest.raises(EnvError, match=r"unknown task 'nope' in env shop: see `gapforge rollouts tasks shop`"):
        env.reset("nope")
    with pytest.raises(EnvError, match="call reset"):
        ShopEnv().step(Message.assistant("hi"))
    env.reset("shop-lookup-001")
    with pytest.raises(EnvError, match="assistant message"):
        env.step(Message.user("hi"))


def test_other_shop_instances_share_the_templates_not_the_data() -> None:
    other = ShopEnv(instance=1)
    assert other.task_ids() == ENV.task_ids()  # the same templates, so the same task ids and families
    assert [other.task_family(t) for t in other.task_ids()] == [ENV.task_family(t) for t in ENV.task_ids()]
    assert build_db(1).state_hash() == build_db(1).state_hash() != build_db(0).state_hash() == build_db().state_hash()
    assert not set(build_db(1).orders) & set(build_db(0).orders)
    tid = other.task_ids()[0]
    messages = other.reset(tid)
    assert messages[-1].content == ENV.task(tid).user.opening  # the same template opening
    assert other.task(tid).gold_actions != ENV.task(tid).gold_actions  # another customer, other ids
    with pytest.raises(EnvError, match="shop instance 3 cannot be built"):
        ShopEnv(instance=3)  # a template's customer lacks what it needs there


def test_a_task_whose_gold_only_reads_scores_against_the_pristine_hash_as_its_replay_would() -> None:
    """The gold hash of a read-only task skips the replay; a replay of its reads on a fresh DB gives that hash."""
    shared = _pristine(0)
    read_only = [t for t in ALL_TASKS if t not in WRITE_TASKS]
    assert read_only
    for tid in read_only:
        db = shared.fresh_db()
        tools_db_before = db.state_hash()
        tools = ShopTools(db)
        for action in ENV.task(tid).gold_actions:
            tools.call(action.name, action.arguments)
        assert db.state_hash() == tools_db_before == ENV._gold_state_hash(ENV.task(tid)), tid
