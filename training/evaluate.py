"""Pass rates of a (base + optional adapter) policy on target tasks, through the training rollout code.

Used for the taught policy's per-family shop pass rates and for the same rates
with a trained adapter. Sampling is at the given temperature with a fixed seed,
so the same model and adapter give the same numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapforge.training.rollout import EnvFactory, run_group
from gapforge.training.sampler import TransformersSampler


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


def pass_rates(
    model: Any,
    tok: Any,
    make_env: EnvFactory,
    tasks: list[Any],
    family_of: Any,
    *,
    samples: int = 2,
    temperature: float = 1.0,
    max_turns: int = 12,
    max_new_tokens: int = 96,
    seed: int = 0,
) -> dict[str, Any]:
    """{family: {"pass_rate", "mean_reward", "episodes"}} plus "all"."""
    from gapforge.training.cpu import set_cpu_threads

    set_cpu_threads()
    sampler = TransformersSampler(model, tok, seed=seed)
    per: dict[str, list[tuple[float, bool]]] = {}
    for task in tasks:
        group = run_group(
            make_env,
            task,
            samples,
            sampler=sampler,
            tokenizer=tok,
            max_turns=max_turns,
            max_new_tokens=max_new_tokens,
            max_completion_length=8192,
            temperature=temperature,
            env_timeout_s=60,
        )
        per.setdefault(family_of(task), []).extend((r.reward, r.success) for r in group)
    per["all"] = [x for fam in list(per.values()) for x in fam]
    return {
        fam: {
            "pass_rate": sum(s for _, s in xs) / len(xs),
            "mean_reward": sum(r for r, _ in xs) / len(xs),
            "episodes": len(xs),
        }
        for fam, xs in per.items()
    }


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
    """The planted behaviour: the agent settled the request (a text turn after the customer gave the
    order id) without ever calling get_order_details before it."""
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
    agents.rollouts.collect, per-episode seeds): {family: {pass_rate, episodes, successes}} plus "all",
    for policy_refusal the share of its failures that skipped the order check (the planted deficit), and for
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
    refusals = [r for r in per.get("policy_refusal", []) if not r["success"]]
    if refusals:
        out["policy_refusal"]["failures_skipping_check"] = round(
            sum(skipped_check(r["messages"]) for r in refusals) / len(refusals), 4
        )
    lookups = [r for r in per.get("lookup_and_answer", []) if not r["success"]]
    if lookups:
        out["lookup_and_answer"]["failures_transferring"] = round(
            sum(transferred(r["messages"]) for r in lookups) / len(lookups), 4
        )
    return out
