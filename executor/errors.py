"""The executor's errors: the cluster it was told to use cannot take the work."""

from __future__ import annotations

from gapforge.faults import InputFault


class ExecutorUnavailable(InputFault):
    """The Ray head cannot be reached, Ray is not installed, or no node can ever hold a job's resources.
    The message names the setting to fix (`executor.address`, `executor.training.num_gpus`, ...); the CLI
    prints it as one line, exit 2."""
