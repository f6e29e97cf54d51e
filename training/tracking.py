"""A training job's curves in the trackers people use (`training.report_to`: tensorboard, wandb, trackio, each when
installed), as a run named `RUN/NAME` grouped by the gapforge run id:

- tensorboard: event files under the job's `tracking_dir` (`<workspace>/tracking/RUN/NAME/`, so `tensorboard
  --logdir <workspace>/tracking` shows a run's adapters, its baseline and its evaluation side by side);
- wandb: group RUN (`WANDB_RUN_GROUP`, unless set), project from `WANDB_PROJECT` as wandb reads it;
- trackio: project RUN.

The evaluation's summary joins them (evaluation/tracking.py). TRL's own callbacks log; gapforge only names and places
the runs."""

from __future__ import annotations

import os
from importlib.util import find_spec
from typing import Any

from gapforge.faults import InputFault


class TrackerMissing(InputFault):
    """training.report_to names a tracker whose package is not installed."""


def check_trackers(report_to: list[str]) -> None:
    """TrackerMissing (one line, exit 2) for a tracker whose package is not installed (config checks the names)."""
    for name in report_to:
        if find_spec(name) is None:
            raise TrackerMissing(f"training.report_to names {name}, which is not installed: pip install {name}")


def trainer_tracking(
    report_to: list[str], tracking_dir: str | None, run_id: str | None, name: str
) -> tuple[list[str], dict[str, Any], list[Any]]:
    """(TRL's report_to, GRPOConfig arguments, extra callbacks) for a job: tensorboard through a callback writing to
    `tracking_dir` (TRL's would write under the adapter's directory), the others through TRL's callbacks with the
    run's name and group."""
    check_trackers(report_to)
    group = run_id or "gapforge"
    args: dict[str, Any] = {"run_name": f"{group}/{name}"} if report_to else {}
    callbacks: list[Any] = []
    rest = [t for t in report_to if t != "tensorboard"]
    if "tensorboard" in report_to and tracking_dir:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=tracking_dir)))
    elif "tensorboard" in report_to:
        rest.append("tensorboard")  # no tracking dir (a job run by hand): TRL's default place
    if "wandb" in rest:
        os.environ.setdefault("WANDB_RUN_GROUP", group)
    if "trackio" in rest:
        args["project"] = group
    return rest, args, callbacks
