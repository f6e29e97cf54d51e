"""Gold shop trajectories for teaching the tiny base policy, with the PLANTED DEFICIT.

A gold trajectory is played through the real `ShopEnv` with its scripted user:
ask for identity, look the customer up, ask for the remaining facts, do the
task's gold actions (a confirmation question before each write), then say the
required information (or refuse, for `policy_refusal`). Only trajectories the
env scores 1.0 are kept.

Planted deficit (the offline demo's story): the policy skips the
eligibility / precondition check before acting. In `policy_refusal` most
training trajectories (`refusal_skip`, default 0.75) drop the order check and
promise the action instead of refusing; elsewhere a few (`other_skip`, 0.10)
drop the `get_order_details` check before the write. The rest stay gold, so the
taught model's behaviour there has variance at temperature 1.0.

Task split: per family the tasks alternate train / eval (the first of each pair
trains, the second is held out), so the model is evaluated on task instances it
never saw.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from envs.protocol import Message, ToolCall

ASK = {"order_id": "the order id", "items": "which item", "reason": "the reason", "address": "the new address",
       "exchange_target": "which variant you want instead", "payment": "the payment method for the refund"}
IDENTITY_ASK = ["Hello! I can help with that. Could you give me your email address?",
                "Sure. First, what is the email address on your account?",
                "I can help. Please tell me your email address."]
IDENTITY_ASK_ZIP = ["Hello! To find your account, what is your full name and zip code?",
                    "Sure. Please give me your full name and zip code."]


@dataclass
class Trajectory:
    task_id: str
    family: str
    messages: list[Message]
    deficit: bool
    reward: float


def split_tasks(env: Any) -> tuple[list[str], list[str]]:
    """(train, eval) task ids: within each family, alternate."""
    train, evaluation = [], []
    by_family: dict[str, list[str]] = {}
    for tid in env.task_ids():
        by_family.setdefault(env.task_family(tid), []).append(tid)
    for ids in by_family.values():
        for i, tid in enumerate(ids):
            (train if i % 2 == 0 else evaluation).append(tid)
    return train, evaluation


def _call(i: int, name: str, args: dict[str, Any]) -> Message:
    return Message.assistant(tool_calls=[ToolCall(id=f"call_{i}", name=name, arguments=args)])


def gold_script(task: Any, rng: random.Random, *, skip_check: bool, promise: bool) -> list[Message]:
    """The assistant turns of one trajectory (played in order against the env)."""
    turns: list[Message] = []
    actions = list(task.gold_actions)
    first = actions[0]
    if first.name == "find_customer_by_email":
        turns.append(Message.assistant(content=rng.choice(IDENTITY_ASK)))
        turns.append(_call(len(turns), first.name, first.arguments))
        actions = actions[1:]
    elif first.name == "find_customer_by_name_zip":
        turns.append(Message.assistant(content=rng.choice(IDENTITY_ASK_ZIP)))
        turns.append(_call(len(turns), first.name, first.arguments))
        actions = actions[1:]
    wanted = [ASK[k] for k in ASK if k in task.user.facts]
    if wanted:
        turns.append(Message.assistant(content="Thanks. Please tell me " + ", ".join(wanted) + "."))
    writes = {"cancel_pending_order", "modify_pending_order_address", "return_delivered_order_items",
              "exchange_delivered_order_items"}
    if promise:  # the deficit in policy_refusal: no check, promise the action
        return turns + [Message.assistant(content="Sure, I have taken care of that for you. It is all processed.")]
    for a in actions:
        if skip_check and a.name == "get_order_details":
            continue
        if a.name in writes:
            turns.append(Message.assistant(content=f"I will now run {a.name.replace('_', ' ')} for this order. Shall I proceed (yes/no)?"))
        turns.append(_call(len(turns), a.name, a.arguments))
    info = " ".join(task.required_info)
    if task.family == "policy_refusal":
        turns.append(Message.assistant(content=f"I'm sorry, I cannot do that: it is {info}." if info else "I'm sorry, I cannot do that."))
    else:
        turns.append(Message.assistant(content=f"Done. {info}".strip()))
    return turns


def play(env: Any, task_id: str, turns: list[Message]) -> tuple[list[Message], float]:
    """Play scripted assistant turns; stop when the env says done."""
    messages = list(env.reset(task_id))
    for turn in turns:
        messages.append(turn)
        result = env.step(turn)
        messages += result.messages
        if result.done:
            break
    return messages, env.score().reward


def build_trajectories(env: Any, task_ids: list[str], *, copies: int, refusal_skip: float, other_skip: float,
                       seed: int) -> list[Trajectory]:
    rng = random.Random(seed)
    out: list[Trajectory] = []
    for tid in task_ids:
        task, family = env.task(tid), env.task_family(tid)
        for _ in range(copies):
            deficit = rng.random() < (refusal_skip if family == "policy_refusal" else other_skip)
            turns = gold_script(task, rng, skip_check=deficit, promise=deficit and family == "policy_refusal")
            messages, reward = play(env, tid, turns)
            if reward == 1.0 or deficit:  # gold must score 1.0; deficit ones are kept as planted
                out.append(Trajectory(tid, family, messages, deficit, reward))
    return out
