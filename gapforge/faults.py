"""The one root of gapforge's errors and one subclass per boundary a failure is blamed on.

Every error a gapforge module raises derives from `GapforgeError` through the class of the
boundary where it happened. The boundary class says, as class attributes, what the failure
means to the rest of the system:

| class | `boundary` | `exit_code` | `infrastructure` | what failed |
| --- | --- | --- | --- | --- |
| `InputFault` | input | 2 | no | a config file, key or value, a command-line argument, a stage's input (ids, paths, run data) |
| `EndpointFault` | endpoint | 3 | yes | a model or policy server that does not answer (connection, 429, 5xx, timeout) past its retries |
| `SandboxFault` | sandbox | 2 | no | Docker or the container: the machine is not set up (a lost container overrides: 3, yes) |
| `EnvCodeFault` | env | 4 | no | a target or synthetic env's own code (raised, hung, crashed, answered garbage) |
| `ModelFault` | model | 2 | no | the model's output (malformed after its re-ask) |
| `StoreFault` | store | 2 | no | the store: its URL, its server, a run id it does not hold |
| `ResumableStop` | infrastructure | 3 | yes | a stage stopped because an endpoint or the sandbox kept failing; what finished is stored |

`exit_code` is the CLI's: 2 means "fix what the message says", 3 means "the work is resumable:
run the command again", 4 means "the env's own code failed: fix the env, then run the command again" (the input
is fine, the infrastructure is fine: the user's or the generated env's code is what to look at).
`infrastructure = True` marks a failure that is nobody's verdict: the graph's per-capability guard
lets it through (the run stops, resumable) instead of failing the capability. A subclass may override
both for its own case (a sandbox lost to an outside kill is the sandbox's, and resumable). `GapforgeError` itself (exit 1) is gapforge's own installation
failing (a prompt file missing): a bug to report, not an input to fix.

It lives in gapforge/ (the package everything installs under) but sits below every layer: it
imports nothing (gapforge/__init__.py is empty too), and it is the one module of gapforge that the
other folders may import (`.importlinter`). A few exceptions are not gapforge's errors on purpose:
the synthetic-env SDK and the in-sandbox server run with the standard library only, a tool's
refusal is the agent's data, the episode loop's time-limit signal becomes a `timeout` termination
where it is raised; tests/gapforge/test_error_root.py lists them with their reasons.
"""

from __future__ import annotations

from typing import ClassVar, Self


class GapforgeError(Exception):
    """The root: never raised for a boundary's failure itself (raise the boundary's class)."""

    boundary: ClassVar[str] = "gapforge"
    exit_code: ClassVar[int] = 1
    infrastructure: ClassVar[bool] = False


class InputFault(GapforgeError):
    """Bad input: config, command line, or a stage's input; the message says what to fix."""

    boundary = "input"
    exit_code = 2


class EndpointFault(GapforgeError):
    """A model or policy endpoint kept failing past its retries; running again later resumes the work."""

    boundary = "endpoint"
    exit_code = 3
    infrastructure = True


class SandboxFault(GapforgeError):
    """The sandbox (Docker, the container) cannot run; the message says what to fix."""

    boundary = "sandbox"
    exit_code = 2


class EnvCodeFault(GapforgeError):
    """An env's own code failed (a target env's or a generated one's); never the sandbox's or the model's doing."""

    boundary = "env"
    exit_code = 4


class ModelFault(GapforgeError):
    """The model's output cannot be used (malformed after its re-ask)."""

    boundary = "model"
    exit_code = 2


class StoreFault(GapforgeError):
    """The store cannot serve the request; the message says what to fix."""

    boundary = "store"
    exit_code = 2


class ResumableStop(GapforgeError):
    """Work stopped because an endpoint or the sandbox kept failing past its retries: what finished is
    stored, the rest is redone by a resume. The message names the cause."""

    boundary = "infrastructure"
    exit_code = 3
    infrastructure = True


class Resumable:
    """A stop whose message can name the command that resumes it: the layer that raises it knows the
    cause (`summary`), the command that knows its own arguments adds the resume line (`with_resume`).
    Mixed into an exception class that calls `_resumable(summary, resume)` from its `__init__`; the
    class's `resume_wording` is its message's tail with the command and without one."""

    resume_wording: ClassVar[tuple[str, str]] = (": resume with `{}`", "")
    summary: str
    resume: str | None

    def _resumable(self, summary: str, resume: str | None) -> str:
        self.summary, self.resume = summary, resume
        with_command, without = self.resume_wording
        return summary + (with_command.format(resume) if resume else without)

    def with_resume(self, resume: str) -> Self:
        """The same stop (its class and attributes), told how to resume; a stop that already says it stays as it is."""
        if self.resume:
            return self
        told = type(self).__new__(type(self))
        told.__dict__.update(self.__dict__)
        if isinstance(self, BaseException) and isinstance(told, BaseException):  # where it was raised and from what
            told.__cause__, told.__context__, told.__traceback__ = self.__cause__, self.__context__, self.__traceback__
            if hasattr(self, "__notes__"):
                told.__notes__ = list(self.__notes__)
        told.args = (told._resumable(self.summary, resume),)  # type: ignore[attr-defined]
        return told


BOUNDARIES: tuple[type[GapforgeError], ...] = (
    InputFault,
    EndpointFault,
    SandboxFault,
    EnvCodeFault,
    ModelFault,
    StoreFault,
    ResumableStop,
)

__all__ = [
    "BOUNDARIES",
    "EndpointFault",
    "EnvCodeFault",
    "GapforgeError",
    "InputFault",
    "ModelFault",
    "Resumable",
    "ResumableStop",
    "SandboxFault",
    "StoreFault",
]
