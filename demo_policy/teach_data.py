"""Gold shop trajectories for teaching the tiny base policy, with the PLANTED DEFICIT.

A gold trajectory is played through the real `ShopEnv` with its scripted user: ask for identity, look the customer
up, ask for the remaining facts, do the task's gold actions (a confirmation question before each write), then say the
required information (or refuse, for `policy_refusal`). Only trajectories the env scores 1.0 are kept.

Planted deficit (the offline demo's story): the policy skips the eligibility / precondition check before acting. In
`policy_refusal` most training trajectories (`refusal_skip`, default 0.75) drop the order check and promise the
action instead of refusing; elsewhere a few (`other_skip`, 0.10) drop the `get_order_details` check before the write.
The rest stay gold, so the taught model's behaviour there has variance at temperature 1.0.

Second planted deficit (`lookup_transfer`, a polish knob): in `lookup_and_answer` a share of the trajectories read
the record holding the asked value and then hand the customer to a human agent (`transfer_to_human_agents`) instead
of answering. Another family and another decision than the first deficit's: the record is read, the answer is never
given (in the tenth of lookups `other_skip` also draws, the order is not looked up first either).

Task split: the model is taught on OTHER shop instances (`ShopEnv(instance=k)`, k >= 1: other customers, emails,
order and item ids, prices and stock; the same task templates) and evaluated on THE shop (instance 0), whose task
instances it never saw. With a fresh customer in every trajectory, memorising ids never pays: the model has to copy
them from the conversation.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.shop.data import _FIRST, _LAST
from gapforge.envs.shop.tools import TRANSFER_TOOL

ASK = {
    "order_id": "the order id",
    "items": "which item",
    "reason": "the reason",
    "address": "the new address",
    "exchange_target": "which variant you want instead",
    "payment": "the payment method for the refund",
}
IDENTITY_ASK = [
    "First, what is the email address on your account?",
    "Could you give me your email address?",
    "Please tell me your email address.",
]
IDENTITY_ASK_ZIP = [
    "To find your account, what is your full name and zip code?",
    "Please give me your full name and zip code.",
]
# What the customer asked for, as the first reply restates it: said right after the opening, it is
# the short-range cue the later turns look back at (never the outcome: eligibility is checked later).
INTENTS = [
    ("cancel a pending order and learn", "cancel an order and find a tracking number"),
    ("cancel a pending order and return", "cancel an order and return an item"),
    ("cancel", "cancel an order"),
    ("change an address and exchange", "change an address and exchange an item"),
    ("change the", "change the address of an order"),
    ("exchange two", "exchange two items"),
    ("exchange", "exchange an item"),
    ("learn the gift card", "check your gift card balance"),
    ("learn the total", "find the total of an order"),
    ("learn the tracking", "find the tracking number of an order"),
    ("return two", "return two items"),
    ("return", "return an item"),
]


def intent(goal: str) -> str:
    return next(phrase for prefix, phrase in INTENTS if goal.startswith(prefix))


@dataclass
class Trajectory:
    task_id: str
    family: str
    messages: list[Message]
    deficit: bool
    reward: float


def teach_instances(n: int) -> list[Any]:
    """ShopEnvs of the first `n` buildable shop instances >= 1 (instance 0, THE shop, is never taught on)."""
    from gapforge.envs.errors import EnvError
    from gapforge.envs.shop import ShopEnv

    envs: list[Any] = []
    k = 0
    while len(envs) < n:
        k += 1
        if k > 50 * n + 50:
            raise RuntimeError(f"fewer than {n} buildable shop instances among 1..{k - 1}")
        try:
            envs.append(ShopEnv(instance=k))
        except EnvError:
            continue  # a template's customer lacks what it needs in this instance
    return envs


def _call(i: int, name: str, args: dict[str, Any]) -> Message:
    return Message.assistant(tool_calls=[ToolCall(id=f"call_{i}", name=name, arguments=args)])


def _say(text: str) -> Message:
    return Message.assistant(content=text)


WRITES = (
    "cancel_pending_order",
    "modify_pending_order_address",
    "return_delivered_order_items",
    "exchange_delivered_order_items",
)


def look_first(actions: list[Any]) -> list[Any]:
    """The gold actions with the order looked up before every write on an order not looked up yet. The shop's gold
    changes a pending order's address without looking (every other write looks first), so a policy taught on it alone
    has never seen a looked-up pending order go on to be re-addressed: once it learns to look (the capability GRPO
    trains), it answers the only looked-up address change it knows, the refused one."""
    out, looked = [], set()
    for a in actions:
        order = (a.arguments or {}).get("order_id")
        if a.name == "get_order_details":
            looked.add(order)
        elif a.name in WRITES and order not in looked:
            out.append(a.model_copy(update={"name": "get_order_details", "arguments": {"order_id": order}}))
            looked.add(order)
        out.append(a)
    return out


def gold_script(
    task: Any,
    rng: random.Random,
    *,
    skip_check: bool,
    promise: bool,
    told: tuple[str, ...] = (),
    promise_repeats: int = 0,
    look: bool = False,
    email_first: bool = False,
    transfer: bool = False,
) -> list[Message]:
    """The assistant turns of one trajectory (played in order against the env). `told`: facts the customer's opening
    already gives (see `build_trajectories`), so they are not asked for. `promise_repeats`: a promise (the deficit) is
    said again this many times when the customer presses. `look`: every write looks its order up first
    (`look_first`). `email_first`: a customer found by name and zip is first asked for the email too (see below).
    `transfer`: after the last gold action the customer is handed to a human agent instead of told the required
    information (the second deficit)."""
    turns: list[Message] = []
    actions = look_first(list(task.gold_actions)) if look else list(task.gold_actions)
    first = actions[0]
    if first.name == "find_customer_by_email":
        if "email" not in told:
            turns.append(_say(f"I can help you {intent(task.goal)}. {rng.choice(IDENTITY_ASK)}"))
        turns.append(_call(len(turns), first.name, first.arguments))
        actions = actions[1:]
    elif first.name == "find_customer_by_name_zip":
        # `email_first`: the opening never says which lookup the customer can serve, so ask for the email as everywhere
        # else; this customer does not remember it and gives name and zip (the reply a policy meets at evaluation).
        # Without it the script asks for name and zip straight away, a choice the conversation gives no cue for.
        turns.append(
            _say(f"I can help you {intent(task.goal)}. {rng.choice(IDENTITY_ASK if email_first else IDENTITY_ASK_ZIP)}")
        )
        turns.append(_call(len(turns), first.name, first.arguments))
        actions = actions[1:]
    wanted = [ASK[k] for k in ASK if k in task.user.facts and k not in told]
    if wanted:
        turns.append(_say("Thanks. Please tell me " + ", ".join(wanted) + "."))
    if promise:  # the deficit in policy_refusal: no check, promise the action
        return turns + [_say("Sure, I have taken care of that for you. You are all set.")] * (1 + promise_repeats)
    for a in actions:
        if skip_check and a.name == "get_order_details":
            continue
        if a.name in WRITES:
            turns.append(_say(f"I will now run {a.name.replace('_', ' ')} for this order. Shall I proceed (yes/no)?"))
        turns.append(_call(len(turns), a.name, a.arguments))
    if transfer:
        return turns + [_call(len(turns), TRANSFER_TOOL, {"summary": f"The customer wants to {task.goal}."})]
    info = " ".join(task.required_info)
    if task.family == "policy_refusal":
        return turns + [_say(f"I'm sorry, I cannot do that: it is {info}." if info else "I'm sorry, I cannot do that.")]
    return turns + [_say(f"Done. {info}".strip())]


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


def build_trajectories(
    pairs: list[tuple[Any, str]],
    *,
    copies: int,
    refusal_skip: float,
    other_skip: float,
    seed: int,
    facts_in_opening: float = 0.0,
    promise_repeats: int = 0,
    look: bool = False,
    email_first: bool = False,
    lookup_transfer: float = 0.0,
) -> list[Trajectory]:
    """`copies` trajectories per (env, task id) pair. With probability `facts_in_opening` (tasks that start with an
    email lookup and name an order) the customer's opening also gives the email and the order id, as many real
    customers (and synthetic envs) do, and the script does not ask for them. The scripted user's later replies do not
    depend on the opening, so the trajectory is played as is and its first user message is then extended with those
    two facts. `look`: every write looks its order up first, as `gold_script`'s. `lookup_transfer`: the share of
    `lookup_and_answer` trajectories with the second deficit (`gold_script`'s `transfer`), drawn from a generator of
    their own so the rest of the draw is the same with or without it."""
    rng = random.Random(seed)
    rng2 = random.Random(seed * 1_000_003 + 2)
    out: list[Trajectory] = []
    for env, tid in pairs:
        task, family = env.task(tid), env.task_family(tid)
        for _ in range(copies):
            deficit = rng.random() < (refusal_skip if family == "policy_refusal" else other_skip)
            facts = task.user.facts
            told: tuple[str, ...] = ()
            if (
                task.gold_actions[0].name == "find_customer_by_email"
                and "email" in facts
                and "order_id" in facts
                and rng.random() < facts_in_opening
            ):
                told = ("email", "order_id")
            transfer = family == "lookup_and_answer" and lookup_transfer > 0 and rng2.random() < lookup_transfer
            promise = deficit and family == "policy_refusal"
            script = {"told": told, "promise_repeats": promise_repeats, "look": look, "email_first": email_first}
            turns = gold_script(task, rng, skip_check=deficit, promise=promise, transfer=transfer, **script)
            deficit = deficit or transfer
            messages, reward = play(env, tid, turns)
            if told:
                opening = next(i for i, m in enumerate(messages) if m.role == "user")
                messages[opening] = Message.user(f"{messages[opening].content} {facts['email']} {facts['order_id']}")
            if reward == 1.0 or deficit:  # gold must score 1.0; deficit ones are kept as planted
                out.append(Trajectory(tid, family, messages, deficit, reward))
    return out


_LONG_DIGITS = re.compile(r"\d{5,}|(?<=_)\d{4}(?!\d)")  # ids, zips; the digits of customer ids
_EMAIL_DIGITS = re.compile(r"(?<=[a-z])\d{2}(?=@)")


_NAMES = re.compile(
    r"(?<![A-Za-z])("
    + "|".join(sorted({n for n in _FIRST + _LAST} | {n.lower() for n in _FIRST + _LAST}, key=len, reverse=True))
    + r")(?![A-Za-z])"
)
_SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vel", "dor", "quin", "zu", "pha", "bri", "sol", "nek", "ar", "ti", "mon"]


def _remap_text(text: str, mapping: dict[str, str], rng: random.Random) -> str:
    def digits(m: re.Match[str]) -> str:
        old = m.group(0)
        if old not in mapping:
            mapping[old] = str(rng.randrange(1, 10)) + "".join(str(rng.randrange(10)) for _ in range(len(old) - 1))
        return mapping[old]

    def name(m: re.Match[str]) -> str:  # a customer's name -> an invented one, same case, same everywhere
        old = m.group(0)
        key = "name:" + old.lower()
        if key not in mapping:
            mapping[key] = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
        new = mapping[key]
        return new.capitalize() if old[0].isupper() else new

    return _NAMES.sub(name, _EMAIL_DIGITS.sub(digits, _LONG_DIGITS.sub(digits, text)))


def _remap_value(value: Any, mapping: dict[str, str], rng: random.Random) -> Any:
    if isinstance(value, str):
        return _remap_text(value, mapping, rng)
    if isinstance(value, list):
        return [_remap_value(v, mapping, rng) for v in value]
    if isinstance(value, dict):
        return {k: _remap_value(v, mapping, rng) for k, v in value.items()}
    return value


def _fresh_prefix(messages: list[Message], cut: int, rng: random.Random) -> list[Message]:
    """`messages[:cut + 1]` with every id-like number and the email's digits replaced by fresh random digits,
    and every customer name by an invented one, consistently across the prefix."""
    mapping: dict[str, str] = {}
    prefix: list[Message] = []
    for m in messages[: cut + 1]:
        calls = [
            c.model_copy(update={"arguments": _remap_value(c.arguments, mapping, rng)}) for c in m.tool_calls or []
        ]
        content = _remap_text(m.content, mapping, rng) if m.content else m.content
        prefix.append(m.model_copy(update={"content": content, "tool_calls": calls or m.tool_calls}))
    return prefix


CHECKS = ("get_order_details", "get_product_details")


def decision_drills(
    pairs: list[tuple[Any, str]],
    per_task: int,
    seed: int,
    look: bool = False,
    email_first: bool = False,
    skip_families: tuple[str, ...] = (),
) -> list[list[Message]]:
    """What to do once the check is done: `per_task` gold trajectories of every (env, task) pair (none with the
    deficit), each cut right after the assistant turn that answers a check's result (a tool result of
    `get_order_details` / `get_product_details` followed by a text turn or another action: refuse with the rule the
    order shows, ask to confirm the right write, answer), ids and names fresh as in `copy_drills`. They are trained on
    their LAST turn only (`demo_policy.teach.tokenize_trajectory(last_only=True)`), so the decision the deficit is
    planted in, check or promise, which comes earlier, is not drilled: the taught policy knows what the check calls
    for, and mostly does not check. `look`: the gold looks every write's order up first (`look_first`), so an allowed
    write has its drill too. `skip_families`: no drills of these families' tasks (a lookup's drill is its answer, the
    decision the second deficit is planted in)."""
    rng = random.Random(seed)
    out: list[list[Message]] = []
    for env, tid in pairs:
        if env.task_family(tid) in skip_families:
            continue
        task = env.task(tid)
        for _ in range(per_task):
            messages, reward = play(
                env, tid, gold_script(task, rng, skip_check=False, promise=False, look=look, email_first=email_first)
            )
            if reward != 1.0:
                continue
            called = {c.id: c.name for m in messages for c in m.tool_calls or []}
            cuts = [
                i
                for i in range(1, len(messages))
                if messages[i].role == "assistant"
                and messages[i - 1].role == "tool"
                and called.get(messages[i - 1].tool_call_id or "") in CHECKS
            ]
            out += [_fresh_prefix(messages, cut, rng) for cut in cuts]
    return out


def copy_drills(trajs: list[Trajectory], per_trajectory: int, seed: int) -> list[list[Message]]:
    """Exercises: a trajectory cut right after one of its assistant turns past the first (a tool call, or a decision:
    ask, confirm, answer, refuse), with every id-like number (5+ digits: order, item, card ids, tracking numbers, zips;
    a customer id's 4) and the email's digits replaced by fresh random digits, and every customer name by an invented
    one, consistently across the prefix. Arguments and answers must then be copied from the conversation, never
    recalled, and every decision point gets more examples than the full trajectories alone give it."""
    rng = random.Random(seed)
    out: list[list[Message]] = []
    for t in trajs:
        cuts = [i for i, m in enumerate(t.messages) if m.role == "assistant"][1:]
        for _ in range(per_trajectory if cuts else 0):
            out.append(_fresh_prefix(t.messages, rng.choice(cuts), rng))
    return out
