"""CPU thread count for training and sampling on a shared machine.

PyTorch's intra-op pool (OpenMP) uses every core by default. When the cores are already busy (load average at or above
the core count), each parallel op waits at a barrier for a thread that is not scheduled: measured here (2 cores, load
~12), one SFT step of the taught policy took 30 s with 2 threads and 10 s with 1, and an elementwise multiply 22 ms vs
4 ms. So use only the cores that are free, at least one.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset), not the host's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on this platform
        return os.cpu_count() or 1


def cuda_available() -> bool:
    """A CUDA device torch can use (False when torch is not installed)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def free_cores() -> int:
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return cores
    return max(1, min(cores, int(cores - load + 1)))


def set_cpu_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads (default: the free cores); returns the number set."""
    import torch

    n = threads or free_cores()
    torch.set_num_threads(n)
    return n
