"""Training jobs as Ray tasks: the adapter comes back to the driver and reloads with PEFT to the same
held-out score; a job that crashes is recorded while the other finishes."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from gapforge.executor import ExecutorConfig, JobResources, job_runner
from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec, open_factory
from gapforge.training.service import METADATA_FILE, TrainJob

pytestmark = pytest.mark.slow  # trains a tiny model


def _job(tmp_path: Path, model_dir: Path, name: str, factory: str, **kw) -> TrainJob:
    cfg = TrainingConfig.tiny(
        max_steps=2,
        groups_per_step=1,
        num_generations=2,
        max_turns=2,
        max_new_tokens=8,
        max_completion_length=128,
        train_seeds=4,
        heldout_seeds=3,
        heldout_samples=2,
        eval_every=1,
        save_every=1,
        patience=10,
    )
    return TrainJob(
        name=name,
        capability=None,
        base_model=str(model_dir),
        config=cfg,
        out_dir=str(tmp_path / "driver" / name),
        env=EnvSpec(kind="python", factory=factory),
        **kw,
    )


def test_a_training_job_on_ray_returns_an_adapter_that_reloads_to_the_same_heldout_score(
    ray_cluster, tmp_path, tiny_model_dir
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gapforge.store.db import Store
    from gapforge.training.selection import evaluate_heldout

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        run_id = store.create_run("trace", {})
    cfg = ExecutorConfig(
        kind="ray", worker_dir=str(tmp_path / "worker"), training=JobResources(num_cpus=1, num_gpus=0, docker=False)
    )
    good = _job(tmp_path, tiny_model_dir, "good", "tests.training.toy_env:ToyDeskEnv", store_url=url, run_id=run_id)
    tracked = find_spec("tensorboard") is not None  # the `tracking` extra: its events come back from the worker
    if tracked:
        config = good.config.model_copy(update={"report_to": ["tensorboard"]})
        good = good.model_copy(update={"config": config, "tracking_dir": str(tmp_path / "tracking" / run_id / "good")})
    broken = _job(tmp_path, tiny_model_dir, "broken", "tests.training.toy_env:NoSuchEnv", store_url=url, run_id=run_id)
    events: list[tuple[str, dict]] = []
    outcomes = job_runner(cfg)([broken, good], tmp_path / "specs", lambda name, event: events.append((name, event)))

    assert outcomes[0].result is None and "NoSuchEnv" in outcomes[0].error  # the crash is recorded ...
    result = outcomes[1].result  # ... and the other job went on
    assert result is not None and result.status == "done" and result.steps == 2
    assert any(n == "good" and e.get("event") == "step" for n, e in events)  # progress streamed back from the worker
    adapter = Path(result.adapter_path)
    assert adapter.is_relative_to(tmp_path / "driver" / "good") and (adapter / "adapter_config.json").is_file()
    assert not (tmp_path / "driver" / "good" / "trl").exists()  # TRL checkpoints stay on the worker
    if tracked:  # the run's tracking dir on the driver, not the worker's path, nothing left in the adapter's dir
        assert list((tmp_path / "tracking" / run_id / "good").glob("events.out.tfevents.*"))
        assert not (tmp_path / "driver" / "good" / "tracking").exists()
    assert json.loads((adapter / METADATA_FILE).read_text())["steps"] == 2
    with Store(url) as store:
        rows = {a.name: a for a in store.adapters(run_id)}
    assert (
        rows["good"].status == "done" and Path(rows["good"].path) == adapter
    )  # registered by the driver, its own path
    assert rows["broken"].status == "failed" and "NoSuchEnv" in rows["broken"].metrics["error"]

    kept = next(e for e in result.curve if e["step"] == result.best_step)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapter)
    make_env, close = open_factory(good.env)
    try:
        again = evaluate_heldout(
            model,
            tokenizer,
            make_env,
            json.loads((adapter / METADATA_FILE).read_text())["heldout_tasks"],
            good.config,
            eval_seed=good.config.seed,
        )
    finally:
        close()
    assert again["rewards"] == kept["rewards"] and len(set(kept["rewards"])) > 1
    assert again["reward"] == pytest.approx(result.heldout_after)


def test_a_training_job_whose_ray_worker_is_killed_resumes_from_its_checkpoint(ray_cluster, tmp_path, tiny_model_dir):
    import os
    import signal

    cfg = ExecutorConfig(
        kind="ray",
        worker_dir=str(tmp_path / "worker"),
        max_retries=1,
        training=JobResources(num_cpus=1, num_gpus=0, docker=False),
    )
    job = _job(tmp_path, tiny_model_dir, "toy", "tests.training.toy_env:ToyDeskEnv", run_id="r1")
    job = job.model_copy(
        update={"config": job.config.model_copy(update={"max_steps": 4, "eval_every": 2, "save_every": 2})}
    )
    checkpoint = tmp_path / "worker" / "r1" / "toy" / "out" / "trl" / "checkpoint-2" / "trainer_state.json"
    events: list[dict] = []
    killed: list[int] = []

    def on_line(_name: str, event: dict) -> None:
        events.append(event)
        if event.get("event") == "step" and not killed and checkpoint.is_file():
            pid = next(e["pid"] for e in events if e.get("event") == "worker")
            os.kill(pid, signal.SIGKILL)  # the Ray worker; its training child dies with it (PR_SET_PDEATHSIG)
            killed.append(pid)

    (outcome,) = job_runner(cfg)([job], tmp_path / "specs", on_line)
    assert killed, "the worker was never killed after its checkpoint"
    assert any(e.get("event") == "retry" for e in events)
    assert outcome.result is not None and outcome.result.steps == 4
    workers = [e["pid"] for e in events if e.get("event") == "worker"]
    assert len(workers) == 2 and workers[1] != killed[0]  # a second worker process ran the retry
    steps = [json.loads(line)["step"] for line in (Path(job.out_dir) / "steps.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 4 and steps[0] == 1  # resumed after step 2: no step twice
