"""The one rule for infrastructure faults, shared by every stage: an endpoint or sandbox failing past its retries
is never the env's or the model's failure. Inside an episode it ends the episode as `endpoint_error` /
`sandbox_error` (envs.errors.INFRA_TERMINATIONS, never counted as a reward); in a check or a stage it raises. Either
way the stage stops with what finished stored, and `stop(...)` gives its one IncompleteStage line (exit 3):

    except INFRA_ERRORS as e:
        raise stop("synthesis of precondition_verification", e, "attempts 1-2 are stored") from None
"""

from __future__ import annotations

from gapforge.agents.errors import IncompleteStage, ModelEndpointError
from gapforge.envs.errors import EndpointError, InfrastructureFailure
from gapforge.sandbox.errors import SandboxLost

# Exceptions that mean "the infrastructure kept failing past its retries" (never the env's, never the model's).
INFRA_ERRORS: tuple[type[BaseException], ...] = (InfrastructureFailure, SandboxLost, ModelEndpointError, EndpointError)
MAX_DETAIL = 400


def cause_of(exc: BaseException) -> str:
    """endpoint | sandbox."""
    if isinstance(exc, InfrastructureFailure):
        return exc.cause
    return "sandbox" if isinstance(exc, SandboxLost) else "endpoint"


def _detail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def stop(stage: str, exc: BaseException, stored: str, *, resume: str | None = None) -> IncompleteStage:
    """The stage's one line: which stage stopped, on what, what is stored (and how to resume)."""
    detail = exc.detail if isinstance(exc, InfrastructureFailure) else str(exc)
    return IncompleteStage(
        f"{stage} stopped: the {cause_of(exc)} kept failing past its retries ({_detail(detail)}); "
        f"nothing was counted against the env or the model; {stored}",
        resume=resume,
    )


def stop_for_report(stage: str, incomplete: dict, stored: str, *, resume: str | None = None) -> IncompleteStage:
    """`stop` for a self-test report the infrastructure left incomplete (sandbox.checks.report.ValidationReport.incomplete)."""
    return IncompleteStage(
        f"{stage} stopped at check {incomplete.get('check')}: the {incomplete.get('cause')} kept failing past "
        f"its retries ({_detail(str(incomplete.get('error', '')))}); nothing was counted against the env; {stored}",
        resume=resume,
    )
