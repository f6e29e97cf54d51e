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
    and the resume command; the CLI prints it as one line and exits 3."""
