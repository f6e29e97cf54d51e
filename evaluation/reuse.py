"""Reuse of played episodes by the routed policy: where the router sends a task to the base, or to an adapter that is
also evaluated alone, the routed policy's episodes are those policies' own.

agents.router.RoutedPolicy decides once per conversation, from its first user message, and then answers every turn
with the very policy object it chose (the base, or `adapters[name]`), at the same temperature. With common random
numbers (envs.sampling: each call's seed comes from the episode key `task#sample`, never from the run or the policy)
the routed policy's episode (task, i) is then the chosen policy's episode (task, i): same first message, same seeds,
same replies. So the stored episode is copied into the routed child run instead of being played again; the copy keeps
`policy` = the source's name, which marks it in the child run.

Exact when the env's episode depends only on (task, sample) and the policy's replies (the premise of common random
numbers). The decision is taken by the routed policy's own `decide` on the stored episode's messages, so it is the
one playing would take (and it is cached there for the routing metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gapforge.agents.router import first_user_message
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


def answered_by(policy: Any, decision: Any) -> str | None:
    """The adapter RoutedPolicy.respond answers with under `decision`, None for its base (the same rule it applies)."""
    adapter = decision.adapter if decision is not None else None
    if not adapter or policy.adapters.get(adapter, policy.base) is policy.base:
        return None
    return adapter


def sources(policy: Any, children: Mapping[str, Any], policies: Mapping[str, Any]) -> dict[str | None, str]:
    """Where a routed `policy` over `policies["base"]` finds its episodes: None (the base) and each adapter name whose
    policy object is also evaluated alone -> that policy's child run (`children`: evaluation name -> child run)."""
    out: dict[str | None, str] = {None: children["base"]}
    for adapter, model in getattr(policy, "adapters", {}).items():
        alone = next((n for n, p in policies.items() if p is model and n in children), None)
        if alone is not None and model is not policy.base:
            out[adapter] = children[alone]
    return out


async def copy_episodes(
    store: Store, *, policy: Any, env: str, sources: Mapping[str | None, str], child: str, counts: dict[str, int]
) -> int:
    """Copy into `child` each episode (task, sample < counts[task]) of a source run whose policy `policy` would answer
    with: the base's (key None) where it routes to the base, an adapter's where it routes to that adapter.

    Keys `child` already holds are left alone (a resumed evaluation copies nothing twice). Returns how many were
    copied.
    """
    have = store.episode_keys(child, env)
    copied = 0
    for source, run in sources.items():
        for row in store.episodes(run, env=env):
            key = (row.task_id, row.sample)
            if row.task_id not in counts or row.sample >= counts[row.task_id] or key in have:
                continue
            first = first_user_message(row.messages)
            if first is None:
                continue  # no first user message yet: the routing of a played episode is not known here
            if answered_by(policy, await policy.decide([Message.user(first)])) != source:
                continue
            store.put_episode(child, env, row.task_id, row.sample, **{f: getattr(row, f) for f in COPIED_FIELDS})
            have.add(key)
            copied += 1
    return copied


def played(metrics: Mapping[str, Any]) -> int:
    """Episodes a policy actually played: its evaluation's episodes less those it copied."""
    return int(metrics.get("episodes", 0)) - int(metrics.get("reused_episodes", 0))
