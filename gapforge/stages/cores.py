"""How this machine's cores are shared between local training processes and this process's own decoding."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from gapforge.training.cpu import usable_cores


class DriverCores:
    """The cores' share-out (module docstring) as jobs and readiness checks start and end.

    GRPO readiness checks decode with the local policy (in this process, or each on a local worker process:
    executor/validation.py) while the capability branches that got there first already train. With 2 cores,
    one training process and the driver decoding on 2 threads, the demo's third precondition env spent 128 s
    in its readiness check (63 s once the driver took 1 thread); beside one busy process the same check took
    145 s on 2 threads and 52 s on 1 (each parallel op waits at a barrier for the thread that is not
    scheduled). And a job left training alone kept its one thread while the other core idled. So, whenever a
    job starts or ends or a readiness check
    starts or ends: each running job gets an equal share of the cores the driver's decoding does not need (one
    while it decodes), never fewer threads than it started with, written to its `TrainJob.threads_file` (it
    applies it from its next step on); the driver's decoding threads get what the jobs leave, at least one
    (serving.batching.set_lane_threads)."""

    def __init__(self) -> None:
        self.jobs: dict[Path, int] = {}  # running local jobs: threads file -> threads the job started with
        self.decoding = 0  # readiness checks decoding in this process now

    @contextlib.contextmanager
    def lend(self, threads: int, threads_file: Path) -> Iterator[None]:
        """A local job runs: `threads` (its starting share) and its threads file."""
        self.jobs[threads_file] = threads
        self._apply()
        try:
            yield
        finally:
            del self.jobs[threads_file]
            threads_file.unlink(missing_ok=True)
            self._apply()

    @contextlib.contextmanager
    def decode(self) -> Iterator[None]:
        """This process decodes with a local policy (a GRPO readiness check) meanwhile."""
        self.decoding += 1
        self._apply()
        try:
            yield
        finally:
            self.decoding -= 1
            self._apply()

    def shares(self) -> tuple[dict[Path, int], int | None]:
        """(threads per running job, threads of the driver's decoding; None: torch's own while no job runs)."""
        if not self.jobs:
            return {}, None
        cores = usable_cores()
        each = max(1, (cores - (1 if self.decoding else 0)) // len(self.jobs))
        jobs = {f: max(start, each) for f, start in self.jobs.items()}
        return jobs, max(1, cores - sum(jobs.values()))

    def _apply(self) -> None:
        from gapforge.serving.batching import set_lane_threads

        jobs, lanes = self.shares()
        set_lane_threads(lanes)
        for path, threads in jobs.items():  # written whole, then renamed: a job never reads half a number
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(f"{threads}\n")
            os.replace(tmp, path)
