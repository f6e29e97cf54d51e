"""How many processes the stages run at once on this machine (training jobs, rollout workers), and the progress
callback's type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gapforge.config import GapforgeConfig
from gapforge.training.cpu import cuda_available, usable_cores

Progress = Callable[[str, str], None]  # (stage or "stage capability", one line)


def available_memory() -> int | None:
    """MemAvailable in bytes (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


JOB_BASE_BYTES = (
    2 << 30
)  # a training process's libraries, tokenizer, envs and sandboxes, measured ~1.9 GB RSS for the tiny policy
WEIGHT_FACTOR = 6  # fp32 weights + activations + LoRA optimizer state, a multiple of the weight files' size


def weight_bytes(model_dir: str | None) -> int:
    """The size of a model directory's weight files (0 when there is none to read)."""
    if not model_dir:
        return 0
    try:
        return sum(p.stat().st_size for p in Path(model_dir).iterdir() if p.suffix in (".safetensors", ".bin"))
    except OSError:
        return 0


def job_memory(model_dir: str | None) -> int:
    """Rough bytes one training process of `model_dir` holds (JOB_BASE_BYTES + WEIGHT_FACTOR x its weight files)."""
    return JOB_BASE_BYTES + WEIGHT_FACTOR * weight_bytes(model_dir)


def share_cores(count: int | None, process_bytes: int) -> tuple[int, int]:
    """(processes, torch threads each) on this CPU: `count` when set, else one per usable core, up to 4 and as many
    as the available memory holds at `process_bytes` each; the cores are shared out among them."""
    cores = usable_cores()
    if count is None:
        memory = available_memory()
        count = max(1, min(cores, 4, memory // process_bytes if memory else 4))
    return count, max(1, cores // count)


def training_slots(cfg: GapforgeConfig) -> tuple[int, int | None]:
    """(training jobs at once, torch threads per job's process or None: the job's own choice).

    Ray: the cluster's resources gate; a CPU-only job (no GPU asked) gets the CPUs it asked for as its
    threads. Local with a GPU or with vLLM generation: one job, as one device's memory allows. Local on
    CPU only: one job per usable core (up to 4, and as many as the available memory holds at
    `job_memory` each; or executor.local_training_jobs), each with its share of the cores — a tiny
    model's GRPO process keeps about one core busy, so on the demo's 2 cores two jobs at once took its
    training from 803 s to 610 s with the same results (README, Quick start)."""
    ex = cfg.executor
    if ex.kind != "local":
        return 1024, (max(1, int(ex.training.num_cpus)) if ex.training.num_gpus == 0 else None)
    if ex.local_training_jobs is None and (cfg.training.generation != "transformers" or cuda_available()):
        return 1, None
    return share_cores(ex.local_training_jobs, job_memory(cfg.policy.local_path))


WORKER_BASE_BYTES = 1 << 30  # a rollout worker's libraries and envs (~0.6 GB RSS measured with the tiny policy)
WORKER_WEIGHT_FACTOR = 3  # weights + KV caches of its batch, a multiple of the weight files' size


def rollout_workers(cfg: GapforgeConfig) -> tuple[int, int | None]:
    """(processes playing rollout and evaluation episodes, torch threads each); 1 = this process's event loop.

    Only a local policy (weights in this process) on a CPU-only machine gets more than one: decoding a small
    model keeps about one core busy per process (the demo's collection ran at ~1.1 cores of 2), while an endpoint
    policy is HTTP requests the one event loop already holds hundreds of, and a GPU is one device's memory.
    Default: one per usable core, up to 4, as many as the available memory holds; executor.local_rollout_workers
    sets it."""
    ex = cfg.executor
    if ex.kind != "local" or cfg.policy.kind != "local":
        return 1, None
    if ex.local_rollout_workers is None and cuda_available():
        return 1, None
    workers, threads = share_cores(
        ex.local_rollout_workers, WORKER_BASE_BYTES + WORKER_WEIGHT_FACTOR * weight_bytes(cfg.policy.local_path)
    )
    return workers, (threads if workers > 1 else None)
