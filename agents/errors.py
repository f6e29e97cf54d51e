"""Errors of the chat-model boundary (agents/llm.py, agents/scripted.py).

ModelError is user-fixable: a missing endpoint or key, an unknown scripted
prompt name, no recorded answer left, an endpoint that stays down after the
retries, a model that cannot produce the requested structure. The CLI prints
its one-line message and exits 2 (gapforge/cli_common.py lists it).

The *policy* side records its failures as data instead (envs.errors.PolicyError);
agents/policy.py translates ModelEndpointError into envs.errors.EndpointError.
"""


class ModelError(Exception):
    """A chat-model configuration or availability problem; the message says what to fix."""


class ModelEndpointError(ModelError):
    """The endpoint kept failing (429, 5xx, timeout, connection) after every retry."""


class StructuredOutputError(ModelError):
    """The model's structured output stayed malformed after the one re-ask."""


class IncompleteStage(Exception):
    """A stage ended with infrastructure failures (endpoint down, sandbox lost): what finished is
    stored, the rest is not final and a resume redoes it. The message names the count, the cause
    and the resume command; the CLI prints it as one line and exits 3.

    `infrastructure = True` marks it for layers that must let it through untouched (the graph's
    per-capability guard re-raises it: the run stops instead of blaming the capability)."""

    infrastructure = True

    def __init__(self, message: str, *, resume: str | None = None) -> None:
        self.summary, self.resume = message, resume
        super().__init__(message + (f": resume with `{resume}`" if resume else ""))

    def with_resume(self, resume: str) -> "IncompleteStage":
        """The same stop, told how to resume (the command that knows its own arguments adds it)."""
        return self if self.resume else IncompleteStage(self.summary, resume=resume)
