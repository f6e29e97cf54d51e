"""Which episode a policy call belongs to, for reproducible sampling under concurrency.

The rollout collector runs many episodes at once; a local policy seeding its sampler by call order would sample
differently depending on which request arrived first. So whoever runs an episode sets `episode_key` (a contextvar:
each asyncio task and `asyncio.to_thread` call sees its own) to a name of the episode, e.g. "shop-lookup-001#2", and
a local policy seeds each call from (its seed, the key, the conversation length): the same episode samples the same
tokens at any concurrency and batch size. The key leaves out the run id on purpose: the base model and an adapter
draw the same random numbers on the same (task, trial), which makes their paired difference less noisy.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

episode_key: ContextVar[str | None] = ContextVar("gapforge_episode_key", default=None)


def keyed_seed(seed: int, key: str, position: int) -> int:
    """A 63-bit sampling seed for call `position` (e.g. the number of messages so far) of episode `key`."""
    digest = hashlib.blake2b(f"{seed}\x00{key}\x00{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
