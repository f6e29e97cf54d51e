"""Joining the Ray cluster named by `executor.address`, once per process, and checking a job's
resources against it before anything is submitted.

A head that does not answer is found by a TCP probe first (Ray's own client retries for minutes):
the error names `executor.address`. Jobs asking for resources no node has (a GPU on a CPU cluster,
Docker where no node declares `executor.docker_resource`) are refused before submission instead of
waiting forever in Ray's queue.
"""

from __future__ import annotations

import importlib.util
import socket
import threading
from typing import Any

from gapforge.executor.config import ExecutorConfig, JobResources
from gapforge.executor.errors import ExecutorUnavailable

_LOCK = threading.Lock()
PROBE_TIMEOUT_S = 3.0


def ray_module() -> Any:
    if importlib.util.find_spec("ray") is None:
        raise ExecutorUnavailable(
            "executor.kind is ray but Ray is not installed: pip install 'gapforge[ray]' (or set executor.kind=local)"
        )
    import ray

    return ray


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise ExecutorUnavailable (one line naming executor.address) when nothing listens at a host:port address."""
    if address in ("", "auto"):
        return
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ExecutorUnavailable(
            f"executor.address {address!r}: no Ray head answers at {host}:{port} ({reason}): "
            "start it with `ray start --head` there, or fix executor.address"
        ) from None


def connect(cfg: ExecutorConfig) -> Any:
    """The `ray` module, joined to the configured cluster (a no-op when this process already is)."""
    ray = ray_module()
    with _LOCK:
        if ray.is_initialized():
            return ray
        probe(cfg.address)
        kwargs: dict[str, Any] = {"namespace": cfg.namespace, "log_to_driver": False}
        if cfg.address:
            kwargs["address"] = cfg.address
        else:
            kwargs.update(include_dashboard=False, num_cpus=cfg.local_num_cpus, resources={cfg.docker_resource: 64})
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ExecutorUnavailable(
                f"executor.address {cfg.address or '(local)'!r}: Ray did not start or connect ({first}): "
                "start the head with `ray start --head`, or fix executor.address"
            ) from None
    return ray


def options(cfg: ExecutorConfig, res: JobResources, *, docker: bool | None = None) -> dict[str, Any]:
    """Ray `.options(...)` for a job with these resources (Docker only when the job really runs a sandbox)."""
    opts: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus}
    if res.docker if docker is None else docker and res.docker:
        opts["resources"] = {cfg.docker_resource: 1}
    return opts


def check_feasible(ray: Any, opts: dict[str, Any], section: str) -> None:
    """Refuse a job that no node of the cluster can ever hold (it would wait in Ray's queue forever)."""
    want = {"CPU": opts.get("num_cpus", 0), "GPU": opts.get("num_gpus", 0), **opts.get("resources", {})}
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(all(node.get(k, 0) >= v for k, v in want.items() if v) for node in nodes):
        return
    missing = [k for k, v in want.items() if v and not any(node.get(k, 0) >= v for node in nodes)]
    fix = {"GPU": f"set {section}.num_gpus=0 or add a GPU node", "CPU": f"lower {section}.num_cpus"}
    other = "start a node with `ray start --resources='{{\"{}\": 8}}'` (Docker there) or set {}.docker=false"
    hints = [fix.get(k) or other.format(k, section) for k in missing] or [f"no single node has all of {want}"]
    raise ExecutorUnavailable(
        f"{section}: no node of the Ray cluster has {', '.join(missing) or 'these resources together'}: {hints[0]}"
    )
