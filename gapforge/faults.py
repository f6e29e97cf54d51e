"""The one root of gapforge's errors and one subclass per boundary a failure is blamed on.

Every error a gapforge module raises derives from `GapforgeError` through the class of the boundary where it happened,
which says, as class attributes, what the failure means to the rest of the system:

| class | `boundary` | `exit_code` | `infrastructure` | what failed |
| --- | --- | --- | --- | --- |
| `InputFault` | input | 2 | no | a config file, key or value, a command-line argument, a stage's input (ids, paths, run data) |
| `EndpointFault` | endpoint | 3 | yes | a model or policy server that does not answer (connection, 429, 5xx, timeout) past its retries |
| `SandboxFault` | sandbox | 2 | no | Docker or the container: the machine is not set up (a lost container overrides: 3, yes) |
| `EnvCodeFault` | env | 4 | no | a target or synthetic env's own code (raised, hung, crashed, answered garbage) |
| `ModelFault` | model | 2 | no | the model's output (malformed after its re-ask) |
| `StoreFault` | store | 2 | no | the store: its URL, its server, a run id it does not hold |
| `ResumableStop` | infrastructure | 3 | yes | a stage stopped because an endpoint or the sandbox kept failing; what finished is stored |

`exit_code` is the CLI's: 2 "fix what the message says", 3 "resumable: run the command again", 4 "the env's own code
failed (input and infrastructure are fine): fix the env, then run again". `infrastructure = True` marks a failure that
is nobody's verdict: the graph's per-capability guard lets it through (the run stops, resumable) instead of failing the
capability; a subclass may override both (a sandbox lost to an outside kill is resumable). `GapforgeError` itself (exit
1) is gapforge's own installation failing (a prompt file missing): a bug to report, not an input to fix.

`first_problem(err)` is a pydantic validation error's first problem on one line, as those messages quote it.
It imports nothing and is the one module of gapforge the other folders may import (`.importlinter`). A few exceptions
are not gapforge's on purpose (the stdlib-only SDK and in-sandbox server, a tool's refusal, the episode loop's time
limit): tests/gapforge/test_error_root.py lists them with their reasons.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self


class GapforgeError(Exception):
    """The root: never raised for a boundary's failure itself (raise the boundary's class)."""

    boundary: ClassVar[str] = "gapforge"
    exit_code: ClassVar[int] = 1
    infrastructure: ClassVar[bool] = False


class InputFault(GapforgeError):
    boundary, exit_code = "input", 2


class EndpointFault(GapforgeError):
    boundary, exit_code, infrastructure = "endpoint", 3, True


class SandboxFault(GapforgeError):
    boundary, exit_code = "sandbox", 2


class EnvCodeFault(GapforgeError):
    boundary, exit_code = "env", 4


class ModelFault(GapforgeError):
    boundary, exit_code = "model", 2


class StoreFault(GapforgeError):
    boundary, exit_code = "store", 2


class ResumableStop(GapforgeError):
    """Work stopped because an endpoint or the sandbox kept failing past its retries: what finished is
    stored, the rest is redone by a resume. The message names the cause."""

    boundary, exit_code, infrastructure = "infrastructure", 3, True


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


def first_problem(err: Any) -> str:
    """A pydantic ValidationError's first problem on one line: `dotted.location: message` (what a one-line error about
    a bad file, request or setting quotes)."""
    first = err.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
