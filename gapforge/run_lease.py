"""One working process per run: the lease every stage command holds while it works on a run.

`gapforge rollouts collect`, `analyze`, `synthesize`, `train`, `evaluate` and the graph (`run`, `--resume`, `demo`) all take it
through `run_lease`, so two processes never work on one run at once: the second one stops
before any work with one line naming the holder (store.leases.RunBusy, a StoreError: exit 2).
A holder that died (SIGKILL) is taken over (store/leases.py). A holder paused past the
lease ttl (`store.lease_ttl_s`) and taken over stops within one heartbeat with one line
(store.fencing.LeaseLost, exit 2), and none of its writes of the run go through (fenced).
Read-only commands (show, report, adapters) take no lease.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gapforge.config import GapforgeConfig


@contextmanager
def run_lease(cfg: GapforgeConfig, run_id: str, command: str) -> Iterator[None]:
    """Hold `run_id`'s lease for the block (renewed in the background, released at the end).
    Raises StoreError for an unknown run, RunBusy when another live process holds it."""
    from gapforge.wiring import open_store

    with (
        open_store(cfg) as store,
        store.lease(run_id, command, ttl_s=cfg.store.lease_ttl_s),
    ):
        yield
