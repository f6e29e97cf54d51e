"""Local training jobs: one per core on a CPU-only machine, each on its share of the cores; one with a GPU."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from gapforge import executor_wiring
from gapforge.config import load_config
from gapforge.stages import common
from gapforge.stages.common import StageContext, training_slots
from gapforge.stages.training import _run_job
from training.config import TrainingConfig
from training.envs import EnvSpec
from training.run import JobOutcome
from training.service import TrainJob


def machine(monkeypatch: pytest.MonkeyPatch, cores: int, gpu: bool) -> None:
    monkeypatch.setattr(common.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(common, "_gpu_visible", lambda: gpu)


@pytest.mark.parametrize(("cores", "settings", "expected"), [
    (2, [], (2, 1)),  # this machine: two jobs, one thread each
    (16, [], (4, 4)),
    (1, [], (1, 1)),
    (2, ["executor.local_training_jobs=1"], (1, 2)),  # as before, the job gets both cores
    (8, ["executor.local_training_jobs=3"], (3, 2)),
])  # fmt: skip
def test_a_cpu_only_machine_trains_one_job_per_core(monkeypatch, cores, settings, expected) -> None:
    machine(monkeypatch, cores, gpu=False)
    assert training_slots(load_config(None, settings, environ={})) == expected


def test_a_gpu_or_vllm_generation_keeps_one_job_unless_told(monkeypatch) -> None:
    machine(monkeypatch, 8, gpu=True)
    assert training_slots(load_config(None, [], environ={})) == (1, None)
    assert training_slots(load_config(None, ["executor.local_training_jobs=2"], environ={})) == (2, 4)
    machine(monkeypatch, 8, gpu=False)
    vllm = ["training.generation=vllm_server", "training.vllm_server_base_url=http://localhost:8000"]
    assert training_slots(load_config(None, vllm, environ={})) == (1, None)
    assert training_slots(load_config(None, ["executor.kind=ray"], environ={}))[0] > 64  # the cluster gates


def job(tmp_path: Path, name: str) -> TrainJob:
    return TrainJob(name=name, base_model=str(tmp_path), env=EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
                    config=TrainingConfig.tiny(), out_dir=str(tmp_path / name))


def test_two_capabilities_train_at_once_each_on_its_share_of_the_cores(monkeypatch, tmp_path) -> None:
    machine(monkeypatch, 2, gpu=False)
    both_running = threading.Barrier(2, timeout=20)  # a second slot missing: the first job waits here alone and breaks it
    threads: dict[str, int | None] = {}

    def runner(jobs, spec_dir, on_line):
        (j,) = jobs
        threads[j.name] = j.cpu_threads
        both_running.wait()
        return [JobOutcome(j.name, 0, None, None)]

    monkeypatch.setattr(executor_wiring, "job_runner", lambda cfg: runner)
    deps = SimpleNamespace(workspace=SimpleNamespace(train_jobs=lambda run_id: tmp_path / "specs"))
    sc = StageContext(load_config(None, [], environ={}), deps)  # type: ignore[arg-type]

    async def both() -> list[JobOutcome]:
        return await asyncio.gather(_run_job(sc, "r", job(tmp_path, "alpha")), _run_job(sc, "r", job(tmp_path, "beta")))

    outcomes = asyncio.run(both())
    assert [o.name for o in outcomes] == ["alpha", "beta"] and threads == {"alpha": 1, "beta": 1}
