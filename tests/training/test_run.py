"""One process per job: kill -> resume from the TRL checkpoint, crashes recorded, others go on; the store row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec
from gapforge.training.run import run_jobs
from gapforge.training.service import METADATA_FILE, TrainJob, train_capability

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # trains a tiny model


def _job(tmp_path, model_dir, name="toy", steps=4, **kw) -> TrainJob:
    cfg = TrainingConfig.tiny(
        max_steps=steps,
        groups_per_step=1,
        num_generations=2,
        max_turns=2,
        max_new_tokens=8,
        max_completion_length=128,
        train_seeds=4,
        heldout_seeds=2,
        heldout_samples=1,
        eval_every=2,
        save_every=2,
        patience=10,
    )
    return TrainJob(
        name=name,
        capability=None,
        base_model=str(model_dir),
        config=cfg,
        out_dir=str(tmp_path / name),
        env=EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
        **kw,
    )


def test_kill_then_resume_from_checkpoint_without_duplicates(tmp_path, tiny_model_dir):
    job = _job(tmp_path, tiny_model_dir)
    job = job.model_copy(update={"env": EnvSpec(kind="python", factory="tests.training.toy_env:GatedToyDeskEnv")})
    spec = tmp_path / "spec.json"
    spec.write_text(job.model_dump_json())
    out = Path(job.out_dir)
    # the job stops at its first episode after checkpoint 2 is saved and is killed there (racing it lost once
    # under a loaded suite: its last two steps take ~0.2 s); the resume below runs in this process, ungated
    gate = out / "trl" / "checkpoint-2" / "trainer_state.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOY_GATE": str(gate)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gapforge.training.run", str(spec)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not Path(f"{gate}.reached").is_file():
        assert proc.poll() is None, "the job ended before it reached the gate after its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "result.json").exists()

    result = train_capability(job)
    assert result.status == "done" and result.steps == 4
    assert 0 < result.cpu_s and result.user_tokens == (0, 0)  # this call's CPU (its process); a scripted user's tokens
    steps = [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 4  # resumed: no step logged twice
    assert [e["step"] for e in result.curve] == [0, 2, 4]
    meta = json.loads((Path(result.adapter_path) / METADATA_FILE).read_text())
    assert meta["base_model_sha256"] and meta["steps"] == 4 and meta["train_tasks"] == [0, 1, 2, 3]
    assert set(meta["heldout_tasks"]).isdisjoint(meta["train_tasks"])
    assert train_capability(job).model_dump() == result.model_dump()  # finished: the saved result, no retraining


STOPPED_LAUNCHER = """
import asyncio, signal, sys
from pathlib import Path
from gapforge.cli import _stop
from gapforge.training.run import run_jobs
from gapforge.training.service import TrainJob

signal.signal(signal.SIGTERM, _stop)  # as `gapforge` installs it
job = TrainJob.model_validate_json(Path(sys.argv[1]).read_text())
try:
    asyncio.run(asyncio.to_thread(run_jobs, [job], Path(sys.argv[2])))  # on a thread, as the train stage runs it
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_sigterm_to_the_launcher_stops_its_job_blames_nothing_and_the_job_resumes(tmp_path, tiny_model_dir):
    job = _job(tmp_path, tiny_model_dir)
    job = job.model_copy(update={"env": EnvSpec(kind="python", factory="tests.training.toy_env:GatedToyDeskEnv")})
    spec, specs, out = tmp_path / "spec.json", tmp_path / "specs", Path(job.out_dir)
    spec.write_text(job.model_dump_json())
    gate = out / "trl" / "checkpoint-2" / "trainer_state.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOY_GATE": str(gate)}
    launcher = subprocess.Popen([sys.executable, "-c", STOPPED_LAUNCHER, str(spec), str(specs)], cwd=ROOT, env=env)
    deadline = time.monotonic() + 300
    while not Path(f"{gate}.reached").is_file():  # the job is mid-training, blocked in an episode
        assert launcher.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    job_pid = int((specs / "toy.pid").read_text())
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=120) == 130
    assert not Path(f"/proc/{job_pid}").exists()  # stopped and reaped with its launcher, not training on as an orphan
    assert not (out / "error.json").exists() and not (out / "result.json").exists()  # stopped, not failed
    result = train_capability(job)  # the resume goes on from the checkpoint
    assert result.status == "done" and result.steps == 4
    steps = [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 4


def test_a_crashed_job_is_recorded_and_the_next_one_runs(tmp_path, tiny_model_dir):
    from gapforge.store.db import Store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        run_id = store.create_run("trace", {})
    bad = _job(tmp_path, tiny_model_dir, name="broken", steps=1, store_url=url, run_id=run_id)
    bad = bad.model_copy(update={"env": EnvSpec(kind="python", factory="tests.training.toy_env:NoSuchEnv")})
    good = _job(tmp_path, tiny_model_dir, name="good", steps=1, store_url=url, run_id=run_id, cpu_threads=1)
    outcomes = run_jobs([bad, good], tmp_path / "specs")
    assert outcomes[0].result is None and outcomes[0].returncode == 1 and "NoSuchEnv" in outcomes[0].error
    assert outcomes[1].result is not None and outcomes[1].result.steps == 1
    assert outcomes[1].result.cpu_threads == 1  # the share the stage gave it, not the machine's free cores
    with Store(url) as store:
        rows = {a.name: a for a in store.adapters(run_id)}
    assert rows["broken"].status == "failed" and "NoSuchEnv" in rows["broken"].metrics["error"]
    assert rows["good"].status == "done" and Path(rows["good"].path).is_dir()


def test_only_json_object_lines_of_a_job_are_progress_events() -> None:
    from gapforge.training.run import _event

    assert _event('{"event": "step", "step": 1}\n') == {"event": "step", "step": 1}
    assert _event("{'loss': 0.1, 'grad_norm': 2.0}\n") is None  # TRL's own log dict: not an event, not a crash
    assert _event("[1, 2]\n") is None and _event("plain text\n") is None


def test_a_job_takes_the_threads_its_launcher_writes_from_its_next_step_on(tmp_path, tiny_model_dir):
    """TrainJob.threads_file: a local job left alone on a CPU gets the cores the finished one leaves (the driver's
    gapforge/stages/cores.DriverCores writes the file); a missing or unreadable file keeps its own count."""
    import torch

    threads_file = tmp_path / "toy.threads"
    threads_file.write_text("garbage")
    job = _job(tmp_path, tiny_model_dir, steps=3, cpu_threads=1, threads_file=str(threads_file))
    seen: list[int] = []

    def progress(event):
        if event.get("event") == "step":
            seen.append(torch.get_num_threads())
            threads_file.write_text({1: "3\n", 2: "2\n"}.get(event["step"], "1\n"))

    before = torch.get_num_threads()
    try:
        result = train_capability(job, progress)
    finally:
        torch.set_num_threads(before)
    assert result.status == "done" and result.cpu_threads == 1
    assert seen == [1, 3, 2]


def test_a_job_process_that_left_no_error_file_is_blamed_on_its_signal_by_name() -> None:
    from gapforge.training.run import exit_reason

    assert exit_reason(-signal.SIGSEGV) == "process ended by SIGSEGV (crashed in native code: a segmentation fault)"
    assert exit_reason(-signal.SIGKILL).startswith("process ended by SIGKILL (killed: out of memory")
    assert exit_reason(-100) == "process ended by signal 100 (ended by a signal)"
    assert exit_reason(7) == "process exited with 7 without writing result.json or error.json"


LAUNCHED = (
    "import os, sys, time; from gapforge.training.run import _die_with_launcher; _die_with_launcher(); "
    "print(os.environ.get('GAPFORGE_JOB_LAUNCHER_PID'), flush=True); time.sleep(60)"
)
LAUNCHER = (
    "import os, subprocess, sys, time; env = dict(os.environ, GAPFORGE_JOB_LAUNCHER_PID=str(os.getpid())); "
    f"p = subprocess.Popen([sys.executable, '-c', {LAUNCHED!r}], env=env, stdout=subprocess.PIPE, text=True); "
    "p.stdout.readline(); print(p.pid, flush=True); time.sleep(60)"
)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_job_launched_to_die_with_its_launcher_does_and_stops_at_once_when_it_is_already_gone(tmp_path) -> None:
    """The job arms PR_SET_PDEATHSIG itself (no preexec_fn: nothing runs between fork and exec in a threaded
    launcher): its launcher SIGKILLed, it dies; started with a launcher pid that is not its parent, it stops."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None
    job_pid = int(launcher.stdout.readline())  # the job runs, armed (it printed: the variable was popped)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{job_pid}").exists() and not _zombie(job_pid):
        time.sleep(0.05)
    assert not Path(f"/proc/{job_pid}").exists() or _zombie(job_pid)

    orphan = subprocess.run(
        [sys.executable, "-c", LAUNCHED],
        env=dict(os.environ, GAPFORGE_JOB_LAUNCHER_PID="1"),  # not its parent: the launcher died before it armed
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert orphan.returncode == -signal.SIGKILL and orphan.stdout == ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def test_a_job_with_report_to_tensorboard_logs_its_steps_in_the_runs_tracking_dir(tmp_path, tiny_model_dir):
    """training.report_to=[tensorboard]: TRL's per-step metrics land under the job's tracking_dir (the run's
    `<workspace>/tracking/RUN/NAME`), named RUN/NAME; none under the adapter's directory."""
    pytest.importorskip(
        "tensorboard", reason="extra 'tracking' not installed (pip install -e .[tracking]); CI installs it"
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job = _job(
        tmp_path, tiny_model_dir, steps=2, run_id="r-track", tracking_dir=str(tmp_path / "tracking" / "r-track" / "toy")
    )
    job = job.model_copy(update={"config": job.config.model_copy(update={"report_to": ["tensorboard"]})})
    result = train_capability(job)
    assert result.status == "done" and result.steps == 2
    events = EventAccumulator(job.tracking_dir).Reload()
    steps = sorted(e.step for e in events.Scalars("train/loss"))
    assert steps == [1, 2]
    assert "train/reward" in events.Tags()["scalars"]
    assert not list(Path(job.out_dir).rglob("events.out.tfevents.*"))
