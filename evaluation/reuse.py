"""Reuse of the base's episodes by the routed policy where the router sends a task to the base.

agents.router.RoutedPolicy decides once per conversation, from its first user message; when the decision is none /
abstain it answers every turn with the very base policy object, at the same temperature. With common random numbers
(envs.sampling: each call's seed comes from the episode key `task#sample`, never from the run or the policy) the
routed policy's episode (task, i) is then the base's episode (task, i): same first message, same seeds, same replies.
So the base's stored episode is copied into the routed child run instead of being played again; the copy keeps
`policy` = the base's name, which marks it in the child run.

Exact when the env's episode depends only on (task, sample) and the policy's replies (the premise of common random
numbers). The decision is taken by the routed policy's own `decide` on the stored base episode's messages, so it is
the one playing would take (and it is cached there for the routing metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gapforge.envs.protocol import Message

if TYPE_CHECKING:
    from gapforge.store import Store

COPIED_FIELDS = tuple(
    "policy messages reward success components termination error turns timings task_family score_info step_info "
    "user_prompt started_at".split()
)


def reuses_base(policy: Any, base: Any) -> bool:
    """A routed policy (it has `decide`) whose fallback is this very base policy object."""
    return callable(getattr(policy, "decide", None)) and getattr(policy, "base", None) is base


def plays_base(policy: Any, decision: Any) -> bool:
    """Whether RoutedPolicy.respond answers with its base under `decision` (the same rule it applies)."""
    if decision is None:
        return True
    adapter = decision.adapter
    return not adapter or policy.adapters.get(adapter, policy.base) is policy.base


async def copy_base_episodes(
    store: Store, *, policy: Any, env: str, base_child: str, child: str, counts: dict[str, int]
) -> int:
    """Copy into `child` the base episodes (task, sample < counts[task]) that `policy` would play with its base.

    Keys `child` already holds are left alone (a resumed evaluation copies nothing twice). Returns how many were
    copied.
    """
    have = store.episode_keys(child, env)
    copied = 0
    for row in store.episodes(base_child, env=env):
        key = (row.task_id, row.sample)
        if row.task_id not in counts or row.sample >= counts[row.task_id] or key in have:
            continue
        messages = [Message.model_validate(m) for m in row.messages]
        if not any(m.role == "user" for m in messages):
            continue  # no first user message yet: the routing of a played episode is not known here
        if not plays_base(policy, await policy.decide(messages)):
            continue
        store.put_episode(child, env, row.task_id, row.sample, **{f: getattr(row, f) for f in COPIED_FIELDS})
        copied += 1
    return copied


def played(metrics: Mapping[str, Any], families: Mapping[str, str]) -> int:
    """Episodes a policy actually played: its evaluation's episodes less those it copied from the base."""
    per_family = metrics.get("trials_by_family") or {}
    reused = sum(per_family.get(families.get(t, ""), 0) for t in metrics.get("reused_base_tasks") or [])
    return int(metrics.get("episodes", 0)) - reused
