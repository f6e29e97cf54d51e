"""One training job per process: `python -m gapforge.training.run SPEC.json`.

SPEC.json is a `training.service.TrainJob` without its store URL (which may hold a password and so never goes into a
file): the launcher passes it in the job process's environment, `GAPFORGE_JOB_STORE_URL`. The process trains, writes
`<out_dir>/result.json` and exits 0; on any failure it writes `<out_dir>/error.json` (error + traceback), registers
the adapter row with status `failed` and exits 1, so a crash (or an OOM kill, seen by the launcher as a signal exit)
of one capability never takes the others down. A full disk is not the capability's failure: the process writes what it
can of `error.json` (`"disk_full": true`), registers nothing and exits 3, and `run_job` raises store.errors.DiskFull
naming the job's directory (the run stops, resumable; the resumed job redoes whatever was left half-written). Progress
lines go to stdout as JSON. `run_jobs(...)` launches the processes one after the other and records each outcome; each
running job's pid is in `SPEC.pid` beside its spec, so a launcher killed mid-job leaves a trace the next launcher acts
on (`stop_stale_job`: the old process is stopped before the job starts again). A launcher that is stopped (`gapforge`
on SIGTERM: `stop_jobs`) stops its jobs with it, records no failure, and the resume trains them from their checkpoints.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from gapforge.store.errors import DiskFull, is_disk_full
from gapforge.training.service import TrainJob, TrainResult, register, train_capability

STORE_URL_ENV = "GAPFORGE_JOB_STORE_URL"
LAUNCHER_PID_ENV = "GAPFORGE_JOB_LAUNCHER_PID"  # set: the job dies with that process (a Ray worker launching it)
DISK_FULL_EXIT = 3  # the job's process found no space left: nothing recorded as the capability's failure
STOP_GRACE_S = 30.0  # after stop_jobs' SIGTERM, a job still running is killed
_LIVE: set[subprocess.Popen] = set()  # this launcher's running job processes (stop_jobs)
_STOPPING = threading.Event()  # the launcher is stopping: a job that ends now was stopped, not failed


def stop_jobs() -> None:
    """The launcher is stopping (`gapforge` got SIGTERM): SIGTERM every job process it started, so each releases its
    sandboxes and exits, and none trains on alone as an orphan. Their ends are not recorded as failures: the resumed
    run trains them again from their checkpoints."""
    _STOPPING.set()
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.terminate()
    timer = threading.Timer(STOP_GRACE_S, _kill_survivors)  # one stuck in native code must not hold the launcher
    timer.daemon = True  # nor keep it alive once its jobs are gone
    timer.start()


def _kill_survivors() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()


@dataclass
class JobOutcome:
    name: str
    returncode: int
    result: TrainResult | None
    error: str | None


def record_failure(job: TrainJob, error: str, tb: str = "") -> None:
    out = Path(job.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "error.json").write_text(json.dumps({"error": error, "traceback": tb}, indent=1))
    empty = {"adapter_path": None, "steps": 0, "best_step": None, "heldout_before": None, "heldout_after": None}
    result = TrainResult(name=job.name, capability=job.capability, status="failed", curve=[], error=error, **empty)
    try:
        register(job, result)
    except Exception as e:  # noqa: BLE001 - the error file already holds the evidence
        print(f"could not register the failure in the store: {e}", file=sys.stderr)


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_file():
        print("usage: python -m gapforge.training.run SPEC.json  (a TrainJob as JSON)", file=sys.stderr)
        return 2
    _die_with_launcher()
    faulthandler.enable()  # a crash in native code leaves a Python stack on stderr (the job's log)
    signal.signal(signal.SIGTERM, _terminate)  # run `finally` blocks and atexit: release every sandbox
    job = TrainJob.model_validate_json(Path(args[0]).read_text())
    job.store_url = os.environ.get(STORE_URL_ENV) or None
    (Path(job.out_dir) / "error.json").unlink(missing_ok=True)
    try:
        result = train_capability(job, progress=lambda row: print(json.dumps(row), flush=True))
    except Exception as e:  # noqa: BLE001 - recorded, then the process exits non-zero
        if is_disk_full(e):
            try:
                (Path(job.out_dir) / "error.json").write_text(
                    json.dumps({"error": f"{type(e).__name__}: {e}", "disk_full": True})
                )
            except OSError:
                pass  # the disk is full: the exit code says it
            full = {"event": "failed", "error": f"no space left on the disk holding {job.out_dir}", "disk_full": True}
            print(json.dumps(full), flush=True)
            return DISK_FULL_EXIT
        record_failure(job, f"{type(e).__name__}: {e}", traceback.format_exc())
        print(json.dumps({"event": "failed", "error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps({"event": "done", **result.model_dump(mode="json")}), flush=True)
    return 0


def _event(line: str) -> dict | None:
    """A progress event the job printed (one JSON object per line); anything else on stdout (e.g. TRL's own log dicts,
    printed with single quotes) is not an event."""
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def pid_file(spec: Path) -> Path:
    """Where the pid of the process training `spec` is kept while it runs."""
    return spec.with_suffix(".pid")


def _trains(pid: int, spec: Path) -> bool:
    """Whether process `pid` is still a trainer of `spec` (a pid is reused once its process is gone). Linux /proc."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"gapforge.training.run" in cmd and str(spec).encode() in cmd


def stop_stale_job(spec: Path, wait_s: float = 10.0) -> bool:
    """Stop the process its pid file names if it still trains `spec` (left running by a launcher that was killed: a
    resumed run must not train the same adapter twice at once); True when one was stopped."""
    try:
        pid = int(pid_file(spec).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    stopped = pid != os.getpid() and _trains(pid, spec)
    if stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            stopped = False
        deadline = time.monotonic() + wait_s
        while stopped and _trains(pid, spec) and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    pid_file(spec).unlink(missing_ok=True)
    return stopped


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a killed orphan is a zombie until init reaps it


def run_jobs(jobs: list[TrainJob], spec_dir: Path, on_line=None) -> list[JobOutcome]:
    """Each job in its own process, one after the other; a crash is recorded and the next job runs (none after
    stop_jobs)."""
    return [run_job(job, spec_dir, on_line) for job in jobs if not _STOPPING.is_set()]


def _die_with_launcher() -> None:
    """In the job process, first thing (Linux): SIGKILL when its launcher dies (PR_SET_PDEATHSIG), when the launcher
    asked for it (`LAUNCHER_PID_ENV`, set by run_job's `die_with_parent`). Set here and not in a `preexec_fn`: that
    would run Python between fork and exec in the launcher's child, and a Ray worker has many threads (a child forked
    from a threaded process may crash or hang before exec: see `subprocess`). A launcher that died before the signal
    was armed is seen here as a changed parent: the job stops at once."""
    launcher = os.environ.pop(LAUNCHER_PID_ENV, None)
    if launcher is None or sys.platform != "linux":
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != int(launcher):
        os.kill(os.getpid(), signal.SIGKILL)


def exit_reason(code: int) -> str:
    """Why a job process that left no error.json ended, from its exit code (a signal is named, never guessed)."""
    if code >= 0:
        return f"process exited with {code} without writing result.json or error.json"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = {
        signal.SIGKILL: "killed: out of memory (the kernel's OOM killer) or stopped by hand",
        signal.SIGSEGV: "crashed in native code: a segmentation fault",
        signal.SIGBUS: "crashed in native code: a bus error (a mapped file cut short?)",
        signal.SIGABRT: "aborted by native code",
        signal.SIGTERM: "stopped",
    }.get(-code, "ended by a signal")
    return f"process ended by {name} ({why})"


def run_job(job: TrainJob, spec_dir: Path, on_line=None, *, die_with_parent: bool = False) -> JobOutcome:
    """One job in its own process (`python -m gapforge.training.run`); its progress events go to `on_line(name,
    event)`. `die_with_parent` (a Ray worker launching it): the job dies with its launcher, so a retry never meets it
    still training."""
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = spec_dir / f"{job.name}.json"
    stop_stale_job(spec)
    spec.write_text(job.model_dump_json(indent=1))
    env = {k: v for k, v in os.environ.items() if k not in (STORE_URL_ENV, LAUNCHER_PID_ENV)}
    if job.store_url:
        env[STORE_URL_ENV] = job.store_url
    if die_with_parent:
        env[LAUNCHER_PID_ENV] = str(os.getpid())  # the job arms PR_SET_PDEATHSIG itself (_die_with_launcher)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gapforge.training.run", str(spec)], stdout=subprocess.PIPE, text=True, env=env
    )
    pid_file(spec).write_text(f"{proc.pid}\n")
    _LIVE.add(proc)
    if _STOPPING.is_set():  # stop_jobs ran while this one was starting
        proc.terminate()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = _event(line) if on_line is not None else None
            if event is not None:
                on_line(job.name, event)
        code = proc.wait()
    finally:
        _LIVE.discard(proc)
        if proc.poll() is not None:
            pid_file(spec).unlink(missing_ok=True)
    if _STOPPING.is_set() and code != 0:  # stopped with its launcher: nothing to blame, a resume trains it again
        return JobOutcome(job.name, code, None, "stopped with its launcher")
    if code == DISK_FULL_EXIT:
        raise DiskFull(job.out_dir, f"adapter {job.name!r} (its checkpoints, held-out adapters or result)")
    done = Path(job.out_dir) / "result.json"
    result = TrainResult.model_validate_json(done.read_text()) if code == 0 and done.is_file() else None
    error = None
    if result is None:
        err = Path(job.out_dir) / "error.json"
        error = json.loads(err.read_text())["error"] if err.is_file() else exit_reason(code)
        if not err.is_file():
            record_failure(job, error)
    return JobOutcome(job.name, code, result, error)


if __name__ == "__main__":
    sys.exit(main())
