"""Training jobs on Ray: one task per capability, with its GPU request (`executor.training`).

The task keeps the job's process isolation: its worker runs `training.run.run_job` (`python -m gapforge.training.run
SPEC` in a child process), so a crash or an OOM kill of the trainer is a failed outcome returned to the driver
(recorded; the other jobs go on), not a lost Ray worker. Nothing assumes a shared filesystem:

- the driver sends the job spec (never the store URL) and, for a sandboxed env, the env module's bytes;
- the worker trains in `executor.worker_dir/<run>/<name>` (the same path on a retry: a job Ray re-runs after its
  worker died resumes from its last TRL checkpoint when it lands on the same node);
- the job's output directory comes back as a tar archive without the TRL checkpoints (the adapter, `result.json`,
  `steps.jsonl`, `selection.json`: LoRA adapters are small), unpacked into the job's `out_dir` on the driver, which
  registers the adapter in the store.

The base model's weights are not shipped: a training node must hold them at `job.base_model` (e.g. `hf download`
there); a node without them fails the job with that one line. Progress events stream back while the job trains (a
Ray streaming generator). A lost worker is retried by the driver (a fresh stream per attempt), and the trainer child
dies with its worker (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import io
import json
import os
import queue
import shutil
import socket
import tarfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gapforge.executor.cluster import check_feasible, connect, options
from gapforge.executor.config import ExecutorConfig
from gapforge.training.run import JobOutcome, record_failure, run_job
from gapforge.training.service import TrainJob, TrainResult, register

OnLine = Callable[[str, dict[str, Any]], None]


def pack_dir(root: Path, *, skip: tuple[str, ...] = ()) -> bytes:
    """A directory as gzipped tar bytes (top-level entries named in `skip` left out)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for entry in sorted(root.iterdir()) if root.is_dir() else []:
            if entry.name not in skip:
                tar.add(entry, arcname=entry.name)
    return buf.getvalue()


TRACKING = "tracking"  # a worker's tensorboard events, inside its out dir (training.report_to)


def unpack_dir(data: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")  # refuses absolute paths and links out of dest


def _job_payload(job: TrainJob) -> dict[str, Any]:
    module = job.env.module if job.env.kind in ("sandbox", "trusted") else None
    return {
        "spec": job.model_dump_json(),
        "module_name": Path(module).name if module else None,
        "module": Path(module).read_bytes() if module else None,
        "key": f"{job.run_id or 'no-run'}/{job.name}",
    }


def train_on_worker(payload: dict[str, Any], worker_dir: str) -> Iterator[tuple[str, Any]]:
    """The Ray task's body (a generator): ("event", {...}) per progress line, then ("outcome", {...})."""
    job = TrainJob.model_validate_json(payload["spec"])
    work = Path(worker_dir) / payload["key"]
    update: dict[str, Any] = {"out_dir": str(work / "out"), "store_url": None}  # the driver registers the adapter
    if job.tracking_dir:  # tensorboard events travel back with the out dir; _finish puts them in the run's tracking dir
        update["tracking_dir"] = str(work / "out" / TRACKING)
    if payload["module"] is not None:
        module = work / "env" / payload["module_name"]
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_bytes(payload["module"])
        update["env"] = job.env.model_copy(update={"module": str(module)})
    job = job.model_copy(update=update)
    if not Path(job.base_model).is_dir():
        error = f"base model directory {job.base_model} is not on Ray node {socket.gethostname()}: put the weights at that path on every training node"
        yield "outcome", {"returncode": 1, "result": None, "error": error, "files": b"", "out_dir": job.out_dir}
        return
    events: queue.Queue[Any] = queue.Queue()
    done = object()

    def train() -> None:
        try:
            events.put(run_job(job, work / "specs", lambda _name, event: events.put(event), die_with_parent=True))
        finally:
            events.put(done)

    yield "event", {"event": "worker", "pid": os.getpid(), "node": socket.gethostname()}
    threading.Thread(target=train, daemon=True).start()
    outcome: JobOutcome | None = None
    while (item := events.get()) is not done:
        if isinstance(item, JobOutcome):
            outcome = item
        else:
            yield "event", item
    if outcome is None:
        raise RuntimeError("the training launcher ended without an outcome")
    result = outcome.result.model_dump(mode="json") if outcome.result is not None else None
    files = pack_dir(Path(job.out_dir), skip=("trl",))
    out = {"returncode": outcome.returncode, "result": result, "error": outcome.error, "files": files}
    yield "outcome", {**out, "out_dir": job.out_dir}


def _finish(job: TrainJob, outcome: dict[str, Any]) -> JobOutcome:
    """Unpack the job's files into its out_dir on the driver, point the result there, register it."""
    out = Path(job.out_dir)
    if outcome["files"]:
        unpack_dir(outcome["files"], out)
    if job.tracking_dir and (out / TRACKING).is_dir():
        shutil.copytree(out / TRACKING, job.tracking_dir, dirs_exist_ok=True)
        shutil.rmtree(out / TRACKING)
    result = None
    if outcome["result"] is not None:
        remote_out = outcome["out_dir"]
        data = outcome["result"]
        if data.get("adapter_path"):
            data["adapter_path"] = str(out / Path(data["adapter_path"]).relative_to(remote_out))
        result = TrainResult.model_validate(data)
        (out / "result.json").write_text(result.model_dump_json(indent=1))
        register(job, result)
        return JobOutcome(job.name, outcome["returncode"], result, None)
    record_failure(job, outcome["error"] or "training failed on its Ray worker")
    return JobOutcome(job.name, outcome["returncode"], None, outcome["error"])


def _uses_docker(job: TrainJob) -> bool:
    return job.env.kind == "sandbox" and job.env.sandbox.get("backend", "docker") == "docker"


def run_jobs_on_ray(
    cfg: ExecutorConfig, jobs: list[TrainJob], spec_dir: Path, on_line: OnLine | None = None
) -> list[JobOutcome]:
    """`training.run.run_jobs` on a Ray cluster: every job at once (each waits for its resources there)."""
    ray = connect(cfg)
    remote = ray.remote(train_on_worker)

    def one(job: TrainJob) -> JobOutcome:
        done = Path(job.out_dir) / "result.json"
        if done.is_file():  # finished before: as train_capability, return the saved result
            return JobOutcome(job.name, 0, TrainResult.model_validate_json(done.read_text()), None)
        opts = options(cfg, cfg.training, docker=_uses_docker(job))
        check_feasible(ray, opts, "executor.training")
        payload = _job_payload(job)
        # the driver retries: a re-run generator streams other events than the first
        for attempt in range(cfg.max_retries + 1):
            stream = remote.options(num_returns="streaming", max_retries=0, **opts).remote(payload, cfg.worker_dir)
            try:
                for ref in stream:
                    kind, value = ray.get(ref)
                    if kind == "event" and on_line is not None:
                        on_line(job.name, value)
                    elif kind == "outcome":
                        return _finish(job, value)
                error = "its Ray task ended without an outcome"
            # its worker died: again (same node: resumes from its checkpoint), then recorded
            except ray.exceptions.RayError as e:
                error = f"its Ray worker was lost {attempt + 1} time(s) ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                if on_line is not None and attempt < cfg.max_retries:
                    on_line(job.name, {"event": "retry", "attempt": attempt + 2, "error": error})
                continue
            break
        record_failure(job, error)
        return JobOutcome(job.name, -1, None, error)

    spec_dir.mkdir(parents=True, exist_ok=True)
    for job in jobs:  # the driver's copy of each spec, as the local launcher leaves it
        (spec_dir / f"{job.name}.json").write_text(json.dumps(json.loads(job.model_dump_json()), indent=1))
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        return list(pool.map(one, jobs))
