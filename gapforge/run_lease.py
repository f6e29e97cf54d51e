"""One working process per run: every stage command (`rollouts collect`, `analyze`, `synthesize`, `train`, `evaluate`,
the graph's `run`, `--resume`, `demo`) holds the run's lease while it works, so a second process stops before any work
with one line naming the holder (store.leases.RunBusy, exit 2). A dead holder (SIGKILL) is taken over; a holder paused
past `store.lease_ttl_s` and taken over stops within one heartbeat (store.fencing.LeaseLost, exit 2) and none of its
writes go through (fenced). Read-only commands (show, report, adapters) take no lease."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gapforge.config import GapforgeConfig


@contextmanager
def run_lease(cfg: GapforgeConfig, run_id: str, command: str) -> Iterator[None]:
    """Hold `run_id`'s lease for the block (renewed in the background, released at the end).
    Raises StoreError for an unknown run, RunBusy when another live process holds it."""
    from gapforge.wiring import open_store

    with open_store(cfg) as store, store.lease(run_id, command, ttl_s=cfg.store.lease_ttl_s):
        yield
