"""The executor's errors: the cluster it was told to use cannot take the work; an episode a worker cannot send back."""

from __future__ import annotations

from gapforge.faults import EnvCodeFault, InputFault


class ExecutorUnavailable(InputFault):
    """The Ray head cannot be reached, Ray is not installed, or no node can ever hold a job's resources.
    The message names the setting to fix (`executor.address`, `executor.training.num_gpus`, ...); the CLI
    prints it as one line, exit 2."""


class EpisodeNotReturned(EnvCodeFault, RuntimeError):
    """An episode a worker process (local or a Ray actor) cannot send back to the driver: what the env put in it
    does not pickle (exit 4, the env's code)."""

    @classmethod
    def of(cls, task_id: str, sample: int, err: BaseException) -> EpisodeNotReturned:
        return cls(
            f"the episode of {task_id}#{sample} could not be sent back from its worker ({err}): the env put "
            "something in StepResult.info or Score.info that is not plain data (a lock, a connection, a "
            "lambda): keep those values to str, numbers, lists and dicts"
        )
