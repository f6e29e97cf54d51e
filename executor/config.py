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
    """What one job asks the Ray scheduler for (a job waits until a node has it free)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    num_cpus: float = Field(1.0, ge=0, description="CPUs reserved per job (Ray's logical CPUs)")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per job; a training job on a GPU cluster wants 1")
    docker: bool = Field(False, description="needs a node that runs Docker: asks for one unit of executor.docker_resource")


class ExecutorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kind: Literal["local", "ray"] = Field("local", description="local: this machine, as before; ray: a Ray cluster (pip install gapforge[ray])")
    address: str = Field("", description="'' starts a local Ray in this process; 'auto' joins the cluster this node belongs to "
                         "(`ray start` ran here); 'host:6379' or 'ray://host:10001' (Ray Client) a remote head")
    namespace: str = Field("gapforge", description="Ray namespace of the jobs")
    local_training_jobs: int | None = Field(None, ge=1, le=64, description=(
        "kind local: training processes at once; default 1 when a GPU is visible or training generates with vLLM "
        "(one device's memory), else one per usable core up to 4 and as many as the available memory holds, each with "
        "cores/jobs torch threads (a tiny model's GRPO process keeps about one core busy: README, Quick start)"))
    local_rollout_workers: int | None = Field(None, ge=1, le=64, description=(
        "kind local with policy.kind local: processes playing rollout and evaluation episodes, each with its own copy of "
        "the weights (executor/processes.py); default 1 (this process's event loop) when a GPU is visible, else one per "
        "usable core up to 4 and as many as the available memory holds; 1 keeps every episode in this process"))
    local_num_cpus: int | None = Field(None, ge=1, description="CPUs of the Ray started in-process (address ''); default: all")
    docker_resource: str = Field("docker", min_length=1, description="custom resource naming nodes with Docker "
                                 "(`ray start --resources='{\"docker\": 8}'`: 8 sandbox jobs at once there)")
    rollout_workers: int = Field(2, ge=1, le=1024, description="Ray actors playing rollout and evaluation episodes, each with its own policy client and envs")
    rollout: JobResources = Field(default_factory=lambda: JobResources(num_cpus=1.0))
    validation: JobResources = Field(default_factory=lambda: JobResources(num_cpus=1.0, docker=True))
    training: JobResources = Field(default_factory=lambda: JobResources(num_cpus=1.0, num_gpus=1.0, docker=True))
    max_retries: int = Field(3, ge=0, le=100, description="times Ray re-runs a job (or restarts an actor) whose worker process died")
    worker_dir: str = Field("/tmp/gapforge-ray", description="scratch directory on each worker (training checkpoints, env "
                            "modules); a training job retried on the same node resumes from its checkpoint there")

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        value = value.strip()
        if value and not _ADDRESS.match(value):
            raise ValueError(f"executor.address {value!r} is not '', 'auto', 'host:port' or 'ray://host:port'")
        return value
