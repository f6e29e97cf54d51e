"""Where a run's files live in the workspace: the one layout synthesis, training, routing,
evaluation and the CLI all read and write (so no stage rebuilds a path by hand).

    <workspace>/synthetic_envs/RUN/CAPABILITY.py              the accepted env (what training loads)
    <workspace>/synthetic_envs/RUN/CAPABILITY/attempt-N.py    every attempt's code, as validated
    <workspace>/adapters/RUN/NAME/                            an adapter (a capability, or a baseline)
    <workspace>/train_jobs/RUN/NAME.json (+ NAME.pid)         a training job's spec and its process
    <workspace>/reports/RUN/                                  report.md and its plots
    <workspace>/tracking/RUN/NAME/                            tensorboard events (training.report_to): each adapter, evaluation
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path

    def synthetic_env(self, run_id: str, capability: str) -> Path:
        """The accepted env module of a capability (re-run it with `gapforge env validate PATH`)."""
        return self.root / "synthetic_envs" / run_id / f"{capability}.py"

    def attempts_dir(self, run_id: str, capability: str) -> Path:
        return self.root / "synthetic_envs" / run_id / capability

    def attempt_module(self, run_id: str, capability: str, attempt: int) -> Path:
        return self.attempts_dir(run_id, capability) / f"attempt-{attempt}.py"

    def adapter_dir(self, run_id: str, name: str) -> Path:
        return self.root / "adapters" / run_id / name

    def train_jobs(self, run_id: str) -> Path:
        return self.root / "train_jobs" / run_id

    def tracking_dir(self, run_id: str, name: str) -> Path:
        return self.root / "tracking" / run_id / name

    def report_dir(self, run_id: str) -> Path:
        return self.root / "reports" / run_id
