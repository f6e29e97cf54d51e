"""Errors at the environment boundary, and the policy-side failures an episode records.

EnvError is user-fixable input (unknown env, unknown task id: an `InputFault`, exit 2).
The PolicyError family is *data*: the policy loop ends the episode with the reason, never
the run; each is blamed on its boundary (`EndpointError` on the endpoint, infrastructure;
the rest on the model). `InfrastructureFailure` is a resumable stop (gapforge/faults.py).
"""

from gapforge.faults import EndpointFault, InputFault, ModelFault, ResumableStop


class EnvError(InputFault):
    """Bad environment input (unknown env name, unknown task id, ...). The message says what to fix."""


class PolicyError(ModelFault):
    """The policy failed to produce a usable message; ends the episode, not the run."""

    termination = "policy_error"


class EndpointError(EndpointFault, PolicyError):
    """The policy endpoint kept failing after retries (connection, 429, 5xx, timeout)."""

    termination = "endpoint_error"


class SimulatorEndpointError(EndpointFault):
    """An LLM the env calls itself (τ²'s or ToolSandbox's user simulator, τ²'s NL judge) could not be reached past its
    retries (no connection, a timeout, 429, 5xx): the endpoint's failure, resumable, not the env's code or the policy's.
    A reply that is wrong stays the env's (EnvError / its own error)."""


class MalformedOutputError(PolicyError):
    """The model produced output that cannot be parsed (e.g. a broken <tool_call> block)."""

    termination = "malformed_output"

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


# Episode terminations that are the infrastructure's doing (endpoint down after its retries, sandbox
# lost to an outside cause, the local rollout worker process playing it died), never the model's or the env's:
# such an episode is not data.
INFRA_TERMINATIONS: frozenset[str] = frozenset({"endpoint_error", "sandbox_error", "worker_error"})


class InfrastructureFailure(ResumableStop):
    """The endpoint or the sandbox kept failing past every retry inside a check or stage: what
    was running is not the env's or the model's doing and not final. `cause`: endpoint | sandbox | worker."""

    def __init__(self, cause: str, detail: str) -> None:
        self.cause, self.detail = cause, detail
        super().__init__(f"the {cause} kept failing: {detail}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # pickles whole (a worker process or Ray sends it back)
        return (type(self), (self.cause, self.detail))


def infra_cause(termination: str | None) -> str | None:
    """'endpoint' / 'sandbox' / 'worker' for an infrastructure termination, else None."""
    return {"endpoint_error": "endpoint", "sandbox_error": "sandbox", "worker_error": "worker"}.get(termination or "")


def is_transient_status(status: int) -> bool:
    """HTTP statuses worth another attempt, for every retry stack (agents' chat models and
    serving's endpoint policy): 408 timeout, 429 rate limit, every 5xx."""
    return status in (408, 429) or status >= 500
