"""Checks 5-6: not trivial (a do-nothing and a random-tool policy score low) and
graded (progressively corrupted reference solutions score lower, multi-level)."""

from __future__ import annotations

import random
import re
from itertools import pairwise
from statistics import mean
from typing import Any

from gapforge.envs.protocol import Message
from gapforge.sandbox.checks.probe import EnvFault, Probe, action_message
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.checks.schemas import random_args, random_value, schema_problems
from gapforge.sandbox.checks.settings import SelfTestThresholds

DO_NOTHING = "I am sorry, I cannot help with that."
_WORD = re.compile(r"[A-Za-z0-9_#@.\-]{3,40}")


def _words(messages: list[Message]) -> list[str]:
    """Tokens of the conversation (ids, names, ...) that the random policy may use as string arguments."""
    seen: dict[str, None] = {}
    for m in messages:
        for w in _WORD.findall(m.content or ""):
            seen.setdefault(w.strip(".-"), None)
    return [w for w in seen if w][:200]


def usable_tools(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Valid tool schemas by name (the random policy only calls these)."""
    return {t["function"]["name"]: t["function"] for t in tools or [] if not schema_problems([t])}


def random_call(tools: dict[str, dict[str, Any]], rng: random.Random, conversation: list[Message]) -> dict[str, Any]:
    """One random tool call as an action {"tool", "arguments"}: a tool of `tools` (non-empty, usable_tools) drawn by `rng`,
    schema-valid random arguments, strings partly taken from the conversation's words (the random-tool policy's move;
    `gapforge env check` plays it on a target too)."""
    fn = tools[rng.choice(sorted(tools))]
    return {"tool": fn["name"], "arguments": random_args(fn.get("parameters") or {}, rng, _words(conversation))}


def play_random(probe: Probe, seed: int, tools: dict[str, dict[str, Any]], calls: int) -> float:
    """Seeded random tool calls with schema-valid random arguments, then a closing text; the reward."""
    env = probe.env()
    rng = random.Random(f"random-tool:{seed}")
    conversation = list(probe.guard("reset", seed, env.reset, seed))
    done = False
    for i in range(calls if tools else 0):
        action = random_call(tools, rng, conversation)
        result = probe.guard("step", seed, env.step, action_message(action, f"rnd_{seed}_{i}"))
        conversation.extend(result.messages)
        if done := result.done:
            break
    if not done:
        probe.guard("step", seed, env.step, Message.assistant(DO_NOTHING))
    return probe.guard("score", seed, env.score).reward


def check_not_trivial(
    probe: Probe, seeds: list[int], tools: list[dict[str, Any]] | None, th: SelfTestThresholds
) -> CheckResult:
    usable = usable_tools(tools)
    nothing: dict[int, float] = {}
    rand: dict[int, float] = {}
    try:
        for seed in seeds:
            nothing[seed] = probe.play(seed, [{"say": DO_NOTHING}]).reward
        for seed in seeds:
            calls = max(th.random_min_calls, len(probe.reference_actions(seed)))
            rand[seed] = play_random(probe, seed, usable, calls)
    except EnvFault as fault:
        return CheckResult.fail("not_trivial", fault.describe(), **fault.evidence())
    evidence = {"do_nothing": _stats(nothing), "random_tool": _stats(rand), "threshold": th.trivial_mean}
    bad = [
        (label, stats)
        for label, stats in (("do-nothing", evidence["do_nothing"]), ("random-tool", evidence["random_tool"]))
        if stats["mean"] >= th.trivial_mean
    ]
    if bad:
        text = "; ".join(
            f"a {label} policy scores mean {s['mean']} (>= {th.trivial_mean}), e.g. seed {s['best_seed']} -> {s['max']}"
            for label, s in bad
        )
        return CheckResult.fail("not_trivial", text, **evidence)
    return CheckResult.ok(
        "not_trivial",
        f"do-nothing mean {evidence['do_nothing']['mean']}, random-tool mean {evidence['random_tool']['mean']} "
        f"(< {th.trivial_mean})",
        **evidence,
    )


def _stats(rewards: dict[int, float]) -> dict[str, Any]:
    best = max(rewards, key=lambda s: rewards[s])
    return {"mean": round(mean(rewards.values()), 4), "max": round(rewards[best], 4), "best_seed": best}


def corruption_plan(
    actions: list[dict[str, Any]], seed: int, tools: dict[str, dict[str, Any]]
) -> list[tuple[int, dict[str, Any] | None]]:
    """A seeded order of (action index, replacement or None = drop); level k corrupts the first k."""
    rng = random.Random(f"graded:{seed}")
    words = sorted({v for a in actions for v in (a.get("arguments") or {}).values() if isinstance(v, str)})
    order = list(range(len(actions)))
    rng.shuffle(order)
    return [(i, None if rng.random() < 0.5 else _alter(actions[i], rng, tools, words)) for i in order]


def _alter(
    action: dict[str, Any], rng: random.Random, tools: dict[str, dict[str, Any]], words: list[str]
) -> dict[str, Any] | None:
    if "say" in action:
        return {"say": DO_NOTHING}
    args = dict(action.get("arguments") or {})
    if not args:
        others = [n for n in sorted(tools) if n != action.get("tool")]
        if not others:
            return None
        fn = tools[rng.choice(others)]
        return {"tool": fn["name"], "arguments": random_args(fn.get("parameters") or {}, rng, words)}
    key = rng.choice(sorted(args))
    props = ((tools.get(action["tool"]) or {}).get("parameters") or {}).get("properties") or {}
    old = args[key]
    for _ in range(5):
        args[key] = random_value(props.get(key, {"type": "string"}), rng, words)
        if args[key] != old:
            break
    else:
        args[key] = f"{old}_x"
    return {"tool": action["tool"], "arguments": args}


def corrupt(
    actions: list[dict[str, Any]], plan: list[tuple[int, dict[str, Any] | None]], k: int
) -> list[dict[str, Any]]:
    changed = dict(plan[:k])
    return [changed.get(i, a) for i, a in enumerate(actions) if i not in changed or changed[i] is not None]


def check_graded(
    probe: Probe, seeds: list[int], tools: list[dict[str, Any]] | None, th: SelfTestThresholds
) -> CheckResult:
    usable = usable_tools(tools)
    chosen = seeds[: th.graded_seeds]
    levels: dict[float, list[float]] = {0.0: []}
    try:
        for seed in chosen:
            actions = probe.reference_actions(seed)
            levels[0.0].append(probe.reference(seed).reward)
            plan = corruption_plan(actions, seed, usable)
            for fraction in th.graded_fractions:
                k = min(len(actions), max(1, round(fraction * len(actions))))
                levels.setdefault(fraction, []).append(probe.play(seed, corrupt(actions, plan, k)).reward)
    except EnvFault as fault:
        return CheckResult.fail("graded", fault.describe(), **fault.evidence())
    means = {f: round(mean(r), 4) for f, r in levels.items()}
    distinct = sorted({round(r, 2) for rs in levels.values() for r in rs})
    steps = list(means.items())
    rises = [(a, b) for (a, ma), (b, mb) in pairwise(steps) if mb > ma + th.graded_tolerance]
    evidence = {
        "mean_by_corrupted_fraction": {str(f): m for f, m in means.items()},
        "distinct_rewards": distinct[:20],
        "seeds": chosen,
    }
    problems = []
    if rises:
        a, b = rises[0]
        problems.append(
            f"corrupting {b:.0%} of the reference actions scores higher ({means[b]}) than {a:.0%} ({means[a]})"
        )
    if steps[-1][1] > steps[0][1] - th.graded_min_drop:
        problems.append(
            f"fully corrupted solutions score {steps[-1][1]}, not {th.graded_min_drop} below the reference ({steps[0][1]})"
        )
    if len(distinct) < th.graded_min_levels:
        problems.append(
            f"only {len(distinct)} distinct reward value(s) {distinct} (need >= {th.graded_min_levels}: partial credit)"
        )
    if problems:
        return CheckResult.fail("graded", "; ".join(problems), **evidence)
    return CheckResult.ok(
        "graded",
        f"mean reward by corrupted share {evidence['mean_by_corrupted_fraction']}, {len(distinct)} reward levels",
        **evidence,
    )
