"""What `gapforge run --estimate` measures before it counts (gapforge/estimate.py): a probe of a few of the target's
episodes played with the configured policy, in memory (nothing is stored), and the task families of
`evaluation.unseen_env` (built, not played)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Probe:
    """Per-episode means over the probe's episodes."""

    episodes: int
    policy_tokens: float  # tokens the policy wrote
    text_tokens: float  # tokens of the whole episode as text (a labeling call reads it, compacted)
    user_prompt: float  # an LLM user simulator's tokens
    user_completion: float
    tokens_per_s: float  # the policy's generation rate over the probe (all its episodes at once)


def probe_target(cfg: Any, episodes: int = 8) -> tuple[Probe, list[str], dict[str, str]]:
    """Play `episodes` of the target's tasks (spread over its families) with the configured policy; (probe, every task
    id, task -> family)."""
    from gapforge.agents.analysis.compact import make_token_counter
    from gapforge.agents.rollouts import CollectPlan, collect
    from gapforge.envs.protocol import user_tokens
    from gapforge.training.evaluate import MemorySink
    from gapforge.wiring import make_policy, make_target_env_factory

    env_name = cfg.rollouts.env
    probe_env, make_env = make_target_env_factory(cfg, env_name)
    try:
        tasks = [str(t) for t in (cfg.rollouts.tasks or probe_env.task_ids())]
        families = {t: probe_env.task_family(t) for t in tasks}
    finally:
        probe_env.close()
    by_family: dict[str, list[str]] = {}
    for t in tasks:
        by_family.setdefault(families.get(t, ""), []).append(t)
    picked: list[str] = []
    while len(picked) < min(episodes, len(tasks)):  # round-robin over the families
        for group in by_family.values():
            if group and len(picked) < episodes:
                picked.append(group.pop(0))
    policy = make_policy(cfg.policy)
    plan = CollectPlan("estimate", env_name, picked, 1, len(picked), cfg.rollouts.max_turns, cfg.policy.temperature)
    sink = MemorySink()

    async def play() -> float:
        t0 = time.perf_counter()
        try:
            await collect(plan, make_env=make_env, policy=policy, sink=sink)
        finally:
            await policy.aclose()
        return time.perf_counter() - t0

    wall = asyncio.run(play())
    counter = make_token_counter(cfg.analysis.tokenizer, cfg.policy.local_path)
    rows = list(sink.rows.values())
    n = max(len(rows), 1)
    written = [sum(counter.count(_text(m)) for m in r["messages"] if m["role"] == "assistant") for r in rows]
    text = [sum(counter.count(_text(m)) for m in r["messages"]) for r in rows]
    prompt, completion = user_tokens(r.get("score_info") for r in rows)
    probe = Probe(
        len(rows), sum(written) / n, sum(text) / n, prompt / n, completion / n, sum(written) / max(wall, 1e-9)
    )
    return probe, tasks, families


def _text(m: dict[str, Any]) -> str:
    """A stored message's text and tool calls (agents.rollouts.episode_fields)."""
    return (m.get("content") or "") + "".join(str(c) for c in m.get("tool_calls") or [])


def unseen_families(cfg: Any) -> dict[str, str] | None:
    """Task -> family of evaluation.unseen_env (built, not played), None without one."""
    from gapforge.wiring import make_target_env_factory

    if not cfg.evaluation.unseen_env:
        return None
    env, _ = make_target_env_factory(cfg, cfg.evaluation.unseen_env)
    try:
        return {t: env.task_family(t) for t in env.task_ids()}
    finally:
        env.close()
