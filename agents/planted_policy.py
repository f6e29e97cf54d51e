"""A scripted base policy for the built-in `shop` env with a PLANTED DEFICIT (offline fixture).

It plays each task from the task's gold actions (a teacher that knows what to do), through
the real env: the real scripted user answers, the real tools act on the DB and the real
reward scores the episode. The deficit, decided per episode by a seeded draw:
- policy_refusal tasks: with probability `refusal_skip` it skips the precondition check
  (order status, return window, final sale, availability) and acts or promises anyway;
- other families: with probability `other_skip` it skips reading the order before a write
  (harmless there: those writes are allowed);
- decoy: it asks the user to confirm a write with probability `confirm`, whatever the task
  (lacking equally in successes and failures);
- unrelated failures: with probability `forget_info` it forgets to tell a required fact.
So failures come mostly from skipped precondition checks: honest episodes for the
analysis, where `precondition_verification` must be retained and the decoy rejected.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Any

from envs.protocol import Message, ToolCall
from envs.shop.data import build_db
from envs.shop.env import ShopEnv
from envs.shop.tools import WRITE_TOOLS

POLICY_NAME = "scripted:planted-deficit"
_ASK = {"email": "your email", "name_zip": "your full name and zip code", "order_id": "the order id", "items": "which item",
        "reason": "the reason", "address": "the new address", "exchange_target": "which variant you want instead",
        "payment": "the refund or payment method"}  # fmt: skip
READS = ("get_order_details", "get_product_details")


@dataclass(frozen=True)
class PlantedDeficit:
    refusal_skip: float = 0.7
    other_skip: float = 0.2
    confirm: float = 0.5
    forget_info: float = 0.1


@functools.lru_cache(maxsize=1)
def _db() -> Any:
    return build_db()


class _Dialogue:
    def __init__(self, env: ShopEnv, task_id: str) -> None:
        self.env, self.messages, self.done, self.n = env, list(env.reset(task_id)), False, 0

    def say(self, text: str) -> None:
        self._send(Message.assistant(text))

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        self._send(Message.assistant(tool_calls=[ToolCall(id=f"call_{self.n}", name=name, arguments=arguments)]))
        return self.messages[-1].content or ""

    def _send(self, msg: Message) -> None:
        if self.done:
            return
        self.n += 1
        self.messages.append(msg)
        res = self.env.step(msg)
        self.messages += res.messages
        self.done = res.done


def _deficit_write(d: _Dialogue, goal: str, order_id: str, confirm: bool) -> None:
    """Act (or promise) on a refusal task without checking whether it is allowed."""
    order = _db().orders.get(order_id)
    if "cancel" in goal:
        call = ("cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
        promise = "I have submitted the cancellation of your order."
    elif "return" in goal and order is not None:
        products = _db().products
        item = next((i for i in order.items if products[i.product_id].final_sale), order.items[0]) if "final" in goal else order.items[0]
        call = ("return_delivered_order_items", {"order_id": order_id, "item_ids": [item.item_id],
                                                 "payment_method_id": order.payment_history[0].payment_method_id})  # fmt: skip
        promise = "I have submitted the return; the refund will follow."
    else:  # address change, exchange: promise without any call
        d.say("I have updated your order as requested.")
        return
    if confirm:
        d.say(f"I will now {call[0].replace('_', ' ')} for order {order_id}. Please confirm (yes) to proceed.")
    d.call(*call)
    d.say(promise)


def play(env: ShopEnv, task_id: str, rng: random.Random, deficit: PlantedDeficit) -> tuple[list[Message], Any, str]:
    """One episode: (messages, score, termination)."""
    t = env.task(task_id)
    d = _Dialogue(env, task_id)
    refusal = t.family == "policy_refusal"
    skip = rng.random() < (deficit.refusal_skip if refusal else deficit.other_skip)
    confirm = rng.random() < deficit.confirm
    forget = not refusal and rng.random() < deficit.forget_info
    if t.user.facts:
        d.say("Could you please tell me " + ", ".join(_ASK[k] for k in t.user.facts) + "?")
    order_ids = re.findall(r"#W\d+", " ".join(t.user.facts.values()))
    if refusal and skip:
        d.call(t.gold_actions[0].name, t.gold_actions[0].arguments)  # identity is still verified
        _deficit_write(d, t.goal, order_ids[0] if order_ids else "", confirm)
    else:
        checked: set[str] = set()
        for g in t.gold_actions:
            if g.name in READS and skip:
                continue
            if g.name in WRITE_TOOLS:
                oid = g.arguments.get("order_id", "")
                if not skip and oid not in checked:
                    d.call("get_order_details", {"order_id": oid})
                if confirm:
                    d.say(f"I will now {g.name.replace('_', ' ')} for order {oid}. Please confirm (yes) to proceed.")
            d.call(g.name, g.arguments)
            if g.name == "get_order_details":
                checked.add(g.arguments.get("order_id", ""))
        if refusal:
            d.say("Unfortunately I cannot do that under our policy: " + "; ".join(t.required_info) + ".")
        else:
            d.say("All done. " + ("" if forget else " ".join(t.required_info)))
    if not d.done:
        d.say("Is there anything else I can help you with?")
    return d.messages, env.score(), "done" if d.done else "agent_stopped"


def collect_planted(store: Any, run_id: str, *, task_ids: list[str] | None = None, samples: int = 2, seed: int = 0,
                    deficit: PlantedDeficit = PlantedDeficit()) -> int:  # fmt: skip
    """Store `samples` episodes per shop task (keyed, idempotent); returns how many episodes the run holds for them."""
    env = ShopEnv()
    tasks = task_ids or env.task_ids()
    for task_id in tasks:
        for k in range(samples):
            messages, score, termination = play(env, task_id, random.Random(f"{seed}:{task_id}:{k}"), deficit)
            store.put_episode(run_id, "shop", task_id, k, policy=POLICY_NAME, messages=messages, reward=score.reward,
                              success=score.success, components=score.components, termination=termination, error=None,
                              turns=sum(m.role == "assistant" for m in messages), timings={},
                              task_family=env.task_family(task_id))  # fmt: skip
    return len(tasks) * samples
