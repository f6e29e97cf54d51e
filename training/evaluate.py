"""A (base + optional adapter) policy loaded for evaluation, and the taught policy's per-family shop pass rates with
the planted behaviours it measures (`shop_rates`: seeded, so the same model gives the same numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_policy(model_dir: str | Path, adapter_dir: str | Path | None = None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    from gapforge.serving.chat_format import load_tokenizer

    tok = load_tokenizer(model_dir)  # the chat format training used
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
    model.eval()
    return model, tok


class MemorySink:
    """An in-memory episode sink for agents.rollouts.collect (nothing is stored)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}

    def episode_keys(self, run_id: str, env: str) -> set[tuple[str, int]]:
        return set(self.rows)

    def add_episode(self, run_id: str, env: str, task_id: str, sample: int, **fields: Any) -> int:
        self.rows[(task_id, sample)] = fields
        return len(self.rows)


def skipped_check(messages: list[dict[str, Any]]) -> bool:
    """The planted behaviour: the agent settled the request (a text turn after the customer gave the order id) without
    ever calling get_order_details before it."""
    order_told = False
    for m in messages:
        if m.get("role") == "user" and "#W" in (m.get("content") or ""):
            order_told = True
        if m.get("role") == "assistant":
            if any(c.get("name") == "get_order_details" for c in m.get("tool_calls") or []):
                return False
            if order_told and m.get("content") and not m.get("tool_calls") and "?" not in m["content"]:
                return True
    return False


def transferred(messages: list[dict[str, Any]]) -> bool:
    """The second planted behaviour, in a failed lookup: the agent handed the customer to a human agent."""
    from gapforge.envs.shop.tools import TRANSFER_TOOL

    return any(
        c.get("name") == TRANSFER_TOOL
        for m in messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    )


async def shop_rates(
    model_dir: str | Path,
    *,
    tasks: list[str] | None = None,
    samples: int = 6,
    temperature: float = 0.7,
    concurrency: int = 8,
    max_turns: int = 10,
    max_new_tokens: int = 96,
    seed: int = 0,
) -> dict[str, Any]:
    """Pass rates per family on THE shop exactly as `gapforge demo` collects (serving.local.LocalPolicy,
    agents.rollouts.collect, per-episode seeds): {family: {pass_rate, episodes, successes}} plus "all", for
    policy_refusal the share of its failures that skipped the order check (the planted deficit), and for
    lookup_and_answer the share of its failures that handed the customer to a human agent (the second)."""
    from gapforge.agents.rollouts import CollectPlan, collect
    from gapforge.envs.shop import ShopEnv
    from gapforge.serving.local import LocalPolicy
    from gapforge.training.cpu import set_cpu_threads

    set_cpu_threads()  # only the free cores: on a busy machine two threads wait on each other (training/cpu.py)
    env = ShopEnv()
    tasks = list(tasks or env.task_ids())
    policy = LocalPolicy(model_dir, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    sink = MemorySink()
    try:
        await collect(
            CollectPlan("rates", "shop", tasks, samples, concurrency, max_turns, temperature),
            make_env=ShopEnv,
            policy=policy,
            sink=sink,
        )
    finally:
        await policy.aclose()
    per: dict[str, list[dict[str, Any]]] = {}
    for (task, _), row in sorted(sink.rows.items()):
        per.setdefault(env.task_family(task), []).append(row)
    per["all"] = [r for fam in list(per.values()) for r in fam]
    out: dict[str, Any] = {}
    for fam, rows in per.items():
        wins = sum(1 for r in rows if r["success"])
        out[fam] = {"pass_rate": round(wins / len(rows), 4), "episodes": len(rows), "successes": wins}
    planted = (
        ("policy_refusal", "failures_skipping_check", skipped_check),
        ("lookup_and_answer", "failures_transferring", transferred),
    )
    for fam, key, measure in planted:
        failed = [r for r in per.get(fam, []) if not r["success"]]
        if failed:
            out[fam][key] = round(sum(measure(r["messages"]) for r in failed) / len(failed), 4)
    return out
