"""Errors of agents/: the chat-model boundary (agents/llm.py, agents/scripted.py), the analysis' input and the
resumable stop; the CLI prints each as one line with its boundary's exit code (gapforge/faults.py).

`ModelError`: user-fixable input (exit 2): a missing endpoint or key, an unknown scripted prompt, no answer left. Its
subclasses are blamed on their own boundary: `ModelEndpointError` on the endpoint (down past its retries, exit 3),
`StructuredOutputError` on the model (exit 2). `AnalysisError`: the analysis cannot run on this input (no episodes,
no failures, no recorded analyst for an env, a bad tokenizer setting; exit 2); an analyst whose output stays invalid
after the re-ask is the model's fault (StructuredOutputError), not the input's. `IncompleteStage`: the resumable stop
(exit 3). The *policy* side records its failures as data instead (envs.errors.PolicyError; agents/policy.py turns
ModelEndpointError into envs.errors.EndpointError).
"""

from gapforge.faults import EndpointFault, InputFault, ModelFault, Resumable, ResumableStop


class ModelError(InputFault):
    """A chat-model configuration problem; the message says what to fix (subclasses: the endpoint's, the model's)."""


class ModelEndpointError(EndpointFault, ModelError):
    """The endpoint kept failing (429, 5xx, timeout, connection) after every retry."""


class StructuredOutputError(ModelFault, ModelError):
    """The model's structured output stayed malformed after the one re-ask."""


class AnalysisError(InputFault):
    """The analysis stage cannot run as asked; the one-line message says what to fix."""


class IncompleteStage(Resumable, ResumableStop):
    """A stage ended with infrastructure failures (endpoint down, sandbox lost): what finished is stored, a resume
    redoes the rest. The message names the count, the cause and the resume command (`with_resume`: a subclass such as
    WorkerLost stays itself). `infrastructure = True` (from `ResumableStop`): layers let it through untouched (the
    graph's per-capability guard re-raises it: the run stops instead of blaming the capability)."""

    def __init__(self, message: str, *, resume: str | None = None) -> None:
        super().__init__(self._resumable(message, resume))
