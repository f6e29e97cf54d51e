"""Which episode a policy call belongs to, for reproducible sampling under concurrency.

The rollout collector (and the GRPO-readiness check) run many episodes at once.
A local policy that seeded its sampler by call order would then sample
differently depending on which episode's request happened to arrive first.
Instead, whoever runs an episode sets `episode_key` (a contextvar: each asyncio
task, and each `asyncio.to_thread` call, sees its own value) to a string that
names the episode, e.g. "shop-lookup-001#2" for sample 2 of that task; a local
policy then seeds each call from (its seed, the key, the conversation length),
so the same episode samples the same tokens at any concurrency and batch size.

The key deliberately leaves out the run id: the base model and an adapter
evaluated on the same (task, trial) draw the same random numbers, which makes
their paired difference less noisy (common random numbers).
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

episode_key: ContextVar[str | None] = ContextVar("gapforge_episode_key", default=None)


def keyed_seed(seed: int, key: str, position: int) -> int:
    """A 63-bit sampling seed for call `position` (e.g. the number of messages so far) of episode `key`."""
    digest = hashlib.blake2b(f"{seed}\x00{key}\x00{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
