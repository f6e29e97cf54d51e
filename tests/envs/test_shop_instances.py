"""A shop of many instances (`shop?instances=...`): hundreds of tasks in the shop's four families, each played on
its own instance's records; instance 0 stays the shop every run has evaluated on."""

from __future__ import annotations

import collections
import hashlib
import json

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.registry import make_env
from gapforge.envs.shop import ShopEnv
from gapforge.envs.shop.data import build_db
from gapforge.envs.shop.env import instance_task_id, parse_instances

# sha256 of THE shop's 44 tasks (ids, gold actions, required info, user scripts) as every stored run saw them
SHOP_TASKS_SHA256 = "44b3478da94d7883edb352e487eba066e51e3201ebbb6f96c960cb2613f23600"


def _digest(env: ShopEnv, ids: list[str]) -> str:
    dump = {t: env.task(t).model_dump() for t in ids}
    return hashlib.sha256(json.dumps(dump, sort_keys=True).encode()).hexdigest()


def _play_gold(env: ShopEnv, task_id: str, *, say: bool = True) -> float:
    task = env.task(task_id)
    env.reset(task_id)
    for i, a in enumerate(task.gold_actions):
        env.step(Message.assistant(tool_calls=[ToolCall(id=f"c{i}", name=a.name, arguments=a.arguments)]))
    if say:
        env.step(Message.assistant("Here is what I found: " + "; ".join(task.required_info) + "."))
    return env.score().reward


def test_instance_zero_is_the_shop_byte_for_byte() -> None:
    shop = ShopEnv()
    many = make_env("shop?instances=0-4")
    assert _digest(shop, shop.task_ids()) == SHOP_TASKS_SHA256
    assert many.task_ids()[:44] == shop.task_ids()  # instance 0 keeps its ids
    assert _digest(many, shop.task_ids()) == SHOP_TASKS_SHA256


def test_an_instance_that_builds_alone_gives_the_same_tasks_under_its_own_names() -> None:
    many = make_env("shop?instances=1,2,4")
    for k in (1, 2, 4):  # instances the shipped policy was taught on build alone, as they always did
        alone = ShopEnv(instance=k)
        for tid in alone.task_ids():
            named = instance_task_id(k, tid)
            assert named.startswith(f"shop-i{k}-")
            assert many.task(named).model_dump() == {**alone.task(tid).model_dump(), "task_id": named}


def test_a_template_no_customer_of_an_instance_serves_as_written_is_served_by_another() -> None:
    with pytest.raises(EnvError, match="shop instance 3 cannot be built as written"):
        ShopEnv(instance=3)  # alone, an instance serves every template as written (the teaching recipe relies on it)
    many = make_env("shop?instances=3,5,6")
    assert many.built == (3, 5, 6)
    per_instance = collections.Counter(t.split("-")[1] for t in many.task_ids())
    assert per_instance == {"i3": 44, "i5": 44, "i6": 44}
    shop = ShopEnv()
    for k in (3, 5, 6):  # the same templates in the same order: the same families and goals
        ids = [t for t in many.task_ids() if t.startswith(f"shop-i{k}-")]
        assert [many.task_family(t) for t in ids] == [shop.task_family(t) for t in shop.task_ids()]
        assert [many.task(t).goal for t in ids] == [shop.task(t).goal for t in shop.task_ids()]
    for tid in many.task_ids():  # every task, substituted ones included, is solvable and not solved by nothing
        assert _play_gold(many, tid) == 1.0, tid
        many.reset(tid)
        many.step(Message.assistant("Sorry, I cannot help with that."))
        assert many.score().reward == 0.0, tid


def test_each_task_plays_on_its_own_instance_records() -> None:
    many = make_env("shop?instances=0,51")
    mine = {"shop-lookup-001": build_db(0), "shop-i51-lookup-001": build_db(51)}
    for tid, db in mine.items():
        find = many.task(tid).gold_actions[0]
        assert find.name == "find_customer_by_email"
        assert any(c.email == find.arguments["email"] for c in db.customers.values())
        assert _play_gold(many, tid) == 1.0
    # the customer of one instance is unknown in the other
    other = many.task("shop-i51-lookup-001").gold_actions[0]
    many.reset("shop-lookup-001")
    reply = many.step(Message.assistant(tool_calls=[ToolCall(id="c", name=other.name, arguments=other.arguments)]))
    assert reply.messages[0].content.startswith("Error")


def test_hundreds_of_tasks_in_the_shops_proportions() -> None:
    many = make_env("shop?instances=51-120")
    families = collections.Counter(many.task_family(t) for t in many.task_ids())
    shop = collections.Counter(ShopEnv().task_family(t) for t in ShopEnv().task_ids())
    n = len(many.built)
    assert n >= 66 and len(many.task_ids()) == 44 * n == len(set(many.task_ids()))
    assert families == {f: c * n for f, c in shop.items()}
    # no two tasks of one instance are the same task (a template that falls back takes what no other task of it asks)
    same = collections.Counter(
        (t.split("-")[1], many.task(t).user.opening, str(many.task(t).gold_actions)) for t in many.task_ids()
    )
    assert max(same.values()) == 1


@pytest.mark.parametrize(
    "spec",
    [
        "shop?instances=5-2",
        "shop?instances=",
        "shop?instances=a",
        "shop?seed=1",
        "shop?instances=1&x=2",
        "shop?instances=0-99999999",
    ],
)
def test_bad_instance_specs_are_one_line_errors(spec: str) -> None:
    with pytest.raises(EnvError) as e:
        make_env(spec)
    assert "\n" not in str(e.value) and "shop?instances=0,51-120" in str(e.value)


def test_instance_lists_parse_to_sorted_unique_numbers() -> None:
    assert parse_instances("0, 51-53,52") == (0, 51, 52, 53)
    assert parse_instances("7") == (7,)


def test_one_instance_and_a_list_of_them_at_once_is_refused() -> None:
    with pytest.raises(EnvError, match="name one, e.g. instances=57"):
        ShopEnv(instance=57, instances=[0, 57])
    assert ShopEnv(instance=0, instances=[0, 57]).built == (0, 57)
