"""The `serving` section: how `gapforge serve` behaves under load and at shutdown."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServeConfig(BaseModel):
    """Limits of the routed endpoint (serving/routed_server.py, serving/admission.py)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    max_queue: int = Field(
        256, ge=1, description="chat requests the server holds at once (being decoded or waiting for the model); one more is answered "
        "429 with Retry-After (the recent mean answer time, 1-60 s) instead of growing the queue")
    request_timeout_s: float = Field(
        300.0, gt=0, description="seconds from a chat request's admission to its answer; past it the request ends with a 504 "
        "(OpenAI-style error body) and its generation is cancelled")
    drain_timeout_s: float = Field(
        25.0, ge=0, description="on SIGTERM / SIGINT: seconds the requests in flight get to finish while new ones are answered 503; "
        "those still running then are cancelled and answered 503 (a second signal ends the wait at once)")
