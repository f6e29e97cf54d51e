"""The `serving` section: how `gapforge serve` behaves under load and at shutdown."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServeConfig(BaseModel):
    """Limits of `gapforge serve` under load and at shutdown."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    max_queue: int = Field(256, ge=1, description="chat requests held at once; one more gets 429 with Retry-After")
    request_timeout_s: float = Field(
        300.0, gt=0, description="seconds from a request's admission to its answer; past it: 504, generation cancelled"
    )
    drain_timeout_s: float = Field(
        25.0, ge=0, description="on SIGTERM / SIGINT: seconds requests in flight get to finish (new ones: 503)"
    )
