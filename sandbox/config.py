"""The sandbox's own config section (`sandbox:` in the one config tree, composed by
gapforge/config.py). Lower layers never import gapforge: callers pass this section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    backend: Literal["docker", "process"] = Field(
        "docker", description="docker, or process: NO isolation, explicit opt-in only"
    )
    image: str = Field("gapforge-sandbox:latest", description="image tag (`gapforge sandbox build-image`)")
    memory_mb: int = Field(512, ge=32, description="memory per container (MB)")
    cpus: float = Field(1.0, gt=0, description="CPUs per container")
    pids_limit: int = Field(64, ge=8, description="processes per container")
    call_timeout_s: float = Field(10.0, gt=0, description="seconds per call into the env")
    start_timeout_s: float = Field(30.0, gt=0, description="seconds for a container to start")
    pool_size: int = Field(4, ge=0, description="containers started ahead of use")
    max_output_bytes: int = Field(1_000_000, ge=1024, description="largest answer read from one call (bytes)")
