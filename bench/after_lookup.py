"""What a policy does right after it has looked the order up, on THE shop's write and refusal tasks.

For each single-write and policy-refusal task: the gold conversation (demo_policy.teach_data.gold_script with
`look=True`, so every write's order is looked up first, the shop's address changes included) up to the
result of the first `get_order_details`, then `--samples` next turns of the policy at `--temperature`,
each seeded by its own key. A next turn is counted as going on to the request (it asks to confirm the write
or calls it), a refusal, a product lookup, or something else; per task, then per requested write.

Why: an allowed write the policy refuses once it has looked is what GRPO's "look first" turns into a loss
on the target (training/README.md, "Why single writes drop"). A policy whose only looked-up address change
is a refused one refuses it here; the shop's own tasks say which requests are allowed.

    .venv/bin/python -m bench.after_lookup [--model DIR] [--samples 20] [--temperature 0.7]

Prints counts; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections import Counter

from gapforge.demo_policy.artifact import SHIPPED
from gapforge.demo_policy.teach_data import gold_script, play
from gapforge.envs.sampling import episode_key
from gapforge.envs.shop import ShopEnv
from gapforge.envs.shop.tools import WRITE_TOOLS


def kind_of(turn) -> str:
    """One next turn: 'go on' (the write, or the question that confirms it), 'refuse', 'product lookup', 'other'."""
    names = [c.name for c in turn.tool_calls or []]
    text = (turn.content or "").lower()
    if any(n in WRITE_TOOLS for n in names) or "shall i proceed" in text or "i will now run" in text:
        return "go on"
    if "get_product_details" in names or "list_products" in names:
        return "product lookup"
    if any(w in text for w in ("cannot", "can't", "unable", "sorry", "not eligible", "not allowed")):
        return "refuse"
    return "other"


def after_lookup(env: ShopEnv, tid: str):
    """The gold conversation of `tid` up to the first order lookup's result (None when it never looks one up)."""
    messages, _ = play(
        env, tid, gold_script(env.task(tid), random.Random(0), skip_check=False, promise=False, look=True)
    )
    called = {c.id: c.name for m in messages for c in m.tool_calls or []}
    for i in range(1, len(messages)):
        if messages[i - 1].role == "tool" and called.get(messages[i - 1].tool_call_id or "") == "get_order_details":
            return messages[:i]
    return None


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(SHIPPED))
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    args = ap.parse_args()

    from gapforge.serving.multi_adapter import MultiAdapterModel

    backend = MultiAdapterModel(args.model, {}, max_new_tokens=args.max_new_tokens, seed=0)
    policy = backend.policy(None, temperature=args.temperature, name="policy")
    env = ShopEnv()
    by_request: dict[str, Counter] = {}
    print(f"model {args.model}; {args.samples} next turns per task at temperature {args.temperature}")
    try:
        for tid in env.task_ids():
            family = env.task_family(tid)
            if family not in ("single_write", "policy_refusal"):
                continue
            prefix = after_lookup(env, tid)
            if prefix is None:
                continue
            counts: Counter = Counter()
            for k in range(args.samples):
                episode_key.set(f"{tid}#after-lookup-{k}")
                counts[kind_of(await policy.respond(prefix, env.tools(), temperature=args.temperature))] += 1
            request = f"{family}: {env.task(tid).goal}"
            by_request.setdefault(request, Counter()).update(counts)
            print(f"{tid}  {request}  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
    finally:
        await backend.aclose()
    print("\nper request (all its tasks):")
    for request, counts in by_request.items():
        total = sum(counts.values())
        print(f"{request}: " + ", ".join(f"{k} {v}/{total}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    asyncio.run(main())
