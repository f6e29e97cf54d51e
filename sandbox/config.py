"""The sandbox's own config section (`sandbox:` in the one config tree, composed by
gapforge/config.py). Lower layers never import gapforge: callers pass this section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    backend: Literal["docker", "process"] = Field("docker", description="process does NOT isolate; explicit opt-in only")
    image: str = "gapforge-sandbox:latest"
    memory_mb: int = Field(512, ge=32)
    cpus: float = Field(1.0, gt=0)
    pids_limit: int = Field(64, ge=8)
    call_timeout_s: float = Field(10.0, gt=0)
    start_timeout_s: float = Field(30.0, gt=0)
    pool_size: int = Field(4, ge=0)
    max_output_bytes: int = Field(1_000_000, ge=1024)
