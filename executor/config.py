"""The executor's config section (`executor:` in the one config tree, composed by gapforge/config.py).

`kind: local` (default) runs everything on this machine: rollouts on this process's event loop (or, with a
local policy on a CPU-only machine, on `local_rollout_workers` processes, one per core), env
validation in this machine's Docker, training jobs as processes (one at a time with a GPU, one per
core on a CPU-only machine: `local_training_jobs`). `kind: ray` sends rollout and
evaluation episodes, sandbox checks and training jobs to a Ray cluster; the driver keeps the graph,
its checkpointer and the store.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_ADDRESS = re.compile(r"^(auto|(ray://)?\[?[A-Za-z0-9_.:-]+\]?:\d{1,5})$")


class JobResources(BaseModel):
    """What one job of this kind asks the Ray scheduler for."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    num_cpus: float = Field(1.0, ge=0, description="CPUs per job (Ray's logical CPUs)")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per job")
    docker: bool = Field(False, description="needs a Docker node (one unit of executor.docker_resource)")


class ExecutorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kind: Literal["local", "ray"] = Field(
        "local", description="local: this machine; ray: a Ray cluster (docs/cluster.md)"
    )
    address: str = Field(
        "",
        description="'': start Ray in this process; auto: join this node's cluster; host:6379 or "
        "ray://host:10001: a remote head",
    )
    namespace: str = Field("gapforge", description="Ray namespace of the jobs")
    local_training_jobs: int | None = Field(
        None,
        ge=1,
        le=64,
        description=(
            "kind local: training processes at once; None: 1 with a GPU or vLLM generation, else one per core up to 4, as memory allows"
        ),
    )
    local_rollout_workers: int | None = Field(
        None,
        ge=1,
        le=64,
        description=(
            "kind local, policy.kind local: processes playing episodes, each with its own weights; None: 1 with a GPU, else one per "
            "core up to 4, as memory allows"
        ),
    )
    local_num_cpus: int | None = Field(
        None, ge=1, description="CPUs of the Ray started in-process (address ''); None: all"
    )
    docker_resource: str = Field("docker", min_length=1, description="Ray custom resource that marks nodes with Docker")
    rollout_workers: int = Field(2, ge=1, le=1024, description="Ray actors playing rollout and evaluation episodes")
    rollout: JobResources = Field(default_factory=lambda: JobResources(num_cpus=1.0))
    validation: JobResources = Field(default_factory=lambda: JobResources(num_cpus=1.0, docker=True))
    training: JobResources = Field(default_factory=lambda: JobResources(num_cpus=1.0, num_gpus=1.0, docker=True))
    max_retries: int = Field(
        3, ge=0, le=100, description="times Ray re-runs a job (or restarts an actor) whose worker process died"
    )
    worker_dir: str = Field(
        "/tmp/gapforge-ray",
        description="scratch directory on each worker; a retried training job resumes from its checkpoint there",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        value = value.strip()
        if value and not _ADDRESS.match(value):
            raise ValueError(f"executor.address {value!r} is not '', 'auto', 'host:port' or 'ray://host:port'")
        return value
