"""Local training jobs: one per core on a CPU-only machine, each on its share of the cores; one with a GPU."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gapforge import executor
from gapforge.config import load_config
from gapforge.serving import batching
from gapforge.stages import RunStages, common
from gapforge.stages import cores as stage_cores
from gapforge.stages.common import rollout_workers, training_slots
from gapforge.stages.training import _run_job
from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec
from gapforge.training.run import JobOutcome
from gapforge.training.service import TrainJob


def machine(monkeypatch: pytest.MonkeyPatch, cores: int, gpu: bool, memory_gb: float | None = 64) -> None:
    monkeypatch.setattr(common, "usable_cores", lambda: cores)
    monkeypatch.setattr(stage_cores, "usable_cores", lambda: cores)
    monkeypatch.setattr(common, "cuda_available", lambda: gpu)
    monkeypatch.setattr(common, "available_memory", lambda: None if memory_gb is None else int(memory_gb * (1 << 30)))


@pytest.mark.parametrize(
    ("cores", "settings", "expected"),
    [
        (2, [], (2, 1)),  # this machine: two jobs, one thread each
        (16, [], (4, 4)),
        (1, [], (1, 1)),
        (2, ["executor.local_training_jobs=1"], (1, 2)),  # one job: it gets both cores
        (8, ["executor.local_training_jobs=3"], (3, 2)),
    ],
)
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
    assert training_slots(load_config(None, ["executor.kind=ray"], environ={})) == (
        1024,
        None,
    )  # the cluster gates; GPU jobs
    on_ray_cpu = ["executor.kind=ray", "executor.training.num_gpus=0", "executor.training.num_cpus=2"]
    assert training_slots(load_config(None, on_ray_cpu, environ={})) == (
        1024,
        2,
    )  # a CPU job's threads: the CPUs it asked for


def test_a_local_policy_on_a_cpu_only_machine_plays_episodes_on_one_process_per_core(monkeypatch, tmp_path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * (1 << 20))  # ~1 GiB + 3 MiB a worker
    local = ["policy.kind=local", f"policy.local_path={model}"]
    machine(monkeypatch, 2, gpu=False)
    assert rollout_workers(load_config(None, local, environ={})) == (2, 1)  # this machine: two workers, one thread each
    assert rollout_workers(load_config(None, [*local, "executor.local_rollout_workers=1"], environ={})) == (
        1,
        None,
    )  # on the loop
    machine(monkeypatch, 16, gpu=False)
    assert rollout_workers(load_config(None, local, environ={})) == (4, 4)
    machine(monkeypatch, 16, gpu=False, memory_gb=2.5)
    assert rollout_workers(load_config(None, local, environ={})) == (2, 8)  # as many as the memory holds
    machine(monkeypatch, 8, gpu=True)
    assert rollout_workers(load_config(None, local, environ={})) == (1, None)  # one device: the loop batches on it
    machine(monkeypatch, 8, gpu=False)
    endpoint = ["policy.kind=endpoint", "policy.endpoint.base_url=http://localhost:8000/v1", "policy.endpoint.model=m"]
    assert rollout_workers(load_config(None, endpoint, environ={})) == (1, None)  # HTTP requests: the loop holds them
    assert rollout_workers(load_config(None, [*local, "executor.kind=ray"], environ={})) == (
        1,
        None,
    )  # Ray actors instead


def test_the_available_memory_caps_the_jobs(monkeypatch, tmp_path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * (1 << 20))  # ~2 GiB + 6 MiB a job
    at = ["policy.kind=local", f"policy.local_path={model}"]
    machine(monkeypatch, 8, gpu=False, memory_gb=4.5)
    assert training_slots(load_config(None, at, environ={})) == (2, 4)
    machine(monkeypatch, 8, gpu=False, memory_gb=1)
    assert training_slots(load_config(None, at, environ={})) == (1, 8)  # never fewer than one
    machine(monkeypatch, 8, gpu=False, memory_gb=None)  # unknown: the core count decides
    assert training_slots(load_config(None, at, environ={})) == (4, 2)
    assert common.job_memory(str(model)) == common.JOB_BASE_BYTES + common.WEIGHT_FACTOR * (1 << 20)


def test_this_machines_cores_and_memory_are_read() -> None:
    assert 1 <= common.usable_cores() <= (os.cpu_count() or 1)
    memory = common.available_memory()
    assert memory is None or memory > 0


def job(tmp_path: Path, name: str) -> TrainJob:
    return TrainJob(
        name=name,
        base_model=str(tmp_path),
        env=EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
        config=TrainingConfig.tiny(),
        out_dir=str(tmp_path / name),
    )


def test_two_capabilities_train_at_once_each_on_its_share_of_the_cores(monkeypatch, tmp_path) -> None:
    machine(monkeypatch, 2, gpu=False)
    both_running = threading.Barrier(
        2, timeout=20
    )  # a second slot missing: the first job waits here alone and breaks it
    threads: dict[str, int | None] = {}

    def runner(jobs, spec_dir, on_line):
        (j,) = jobs
        threads[j.name] = j.cpu_threads
        both_running.wait()
        return [JobOutcome(j.name, 0, None, None)]

    monkeypatch.setattr(executor, "job_runner", lambda ex: runner)
    deps = SimpleNamespace(workspace=SimpleNamespace(train_jobs=lambda run_id: tmp_path / "specs"))
    sc = RunStages(load_config(None, [], environ={}), deps)  # type: ignore[arg-type]

    async def both() -> list[JobOutcome]:
        return await asyncio.gather(_run_job(sc, "r", job(tmp_path, "alpha")), _run_job(sc, "r", job(tmp_path, "beta")))

    outcomes = asyncio.run(both())
    assert [o.name for o in outcomes] == ["alpha", "beta"] and threads == {"alpha": 1, "beta": 1}


def test_local_jobs_and_the_drivers_decoding_share_the_cores(monkeypatch, tmp_path) -> None:
    """DriverCores: each running job gets an equal share of the cores the driver's decoding does not need (one
    while a readiness check decodes), never fewer than it started with; the driver's decoding gets the rest,
    at least one; nothing is set while no job runs."""
    machine(monkeypatch, 4, gpu=False)
    cores = stage_cores.DriverCores()
    a, b = tmp_path / "a.threads", tmp_path / "b.threads"
    assert cores.shares() == ({}, None)
    with cores.lend(1, a):
        assert cores.shares() == ({a: 4}, 1) and a.read_text() == "4\n"  # alone: every core
        with cores.decode():
            assert cores.shares() == ({a: 3}, 1) and a.read_text() == "3\n"
            assert batching._LANE_THREADS[0] == 1
            with cores.lend(2, b):
                assert cores.shares() == ({a: 1, b: 2}, 1)  # 3 // 2 = 1 each, but b started with 2
        assert cores.shares() == ({a: 4}, 1) and not b.exists()
    assert cores.shares() == ({}, None) and not a.exists() and batching._LANE_THREADS[0] is None


def test_a_local_job_gets_a_threads_file_and_the_cores_the_other_leaves(monkeypatch, tmp_path) -> None:
    """Two jobs on 2 cores: one thread each while both run (the driver decodes on 1); the one left alone is
    told 2 from its next step on; the files are gone after."""
    machine(monkeypatch, 2, gpu=False)
    both_running = threading.Barrier(2, timeout=20)
    alpha_done = threading.Event()
    seen: dict[str, list[str]] = {}

    def runner(jobs, spec_dir, on_line):
        (j,) = jobs
        path = Path(j.threads_file)
        assert path.parent == spec_dir and j.cpu_threads == 1
        both_running.wait()
        seen[j.name] = [path.read_text().strip(), str(batching._LANE_THREADS[0])]
        both_running.wait()
        if j.name == "alpha":
            alpha_done.set()
        else:
            alpha_done.wait(20)
            deadline = time.monotonic() + 20
            while path.read_text().strip() != "2" and time.monotonic() < deadline:  # alpha's lend ends on the loop
                time.sleep(0.01)
            seen[j.name].append(path.read_text().strip())
        return [JobOutcome(j.name, 0, None, None)]

    monkeypatch.setattr(executor, "job_runner", lambda ex: runner)
    deps = SimpleNamespace(workspace=SimpleNamespace(train_jobs=lambda run_id: tmp_path / "specs"))
    sc = RunStages(load_config(None, [], environ={}), deps)  # type: ignore[arg-type]

    async def both() -> None:
        await asyncio.gather(_run_job(sc, "r", job(tmp_path, "alpha")), _run_job(sc, "r", job(tmp_path, "beta")))

    try:
        asyncio.run(both())
    finally:
        batching.set_lane_threads(None)
    assert seen == {"alpha": ["1", "1"], "beta": ["1", "1", "2"]}
    assert not list((tmp_path / "specs").glob("*.threads")) and sc.driver_cores.shares() == ({}, None)
