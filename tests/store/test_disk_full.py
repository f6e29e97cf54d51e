"""A full disk with the real components: a small tmpfs workspace filled to the brim (needs root to mount
one; skipped with the reason otherwise). A collect that meets ENOSPC writing episodes exits 3 with one
line naming the store file and the resume command; after space is freed `--run` resumes with nothing
duplicated or lost. An adapter write that meets ENOSPC leaves nothing read back as an adapter, and the
training job's resume redoes a checkpoint or held-out adapter that was cut."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_id_in
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.store import Store
from gapforge.store.errors import DiskFull
from gapforge.store.files import MANIFEST, check_dir, complete_dir

LOOKUPS = ",".join(f"shop-lookup-00{i}" for i in range(1, 9))
SAMPLES = 4


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs at tmp_path/disk, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave_kib: int) -> Path:
    """Fill `disk` until `leave_kib` KiB are free; the filler file is returned (delete it to free the space)."""
    filler = disk / f"filler-{uuid.uuid4().hex[:6]}"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave_kib * 1024))
    return filler


def _episodes(db: Path, run_id: str) -> list:
    with Store(f"sqlite:///{db}") as s:
        return s.episodes(run_id)


def test_collect_on_a_full_disk_exits_3_and_resumes_without_duplicates(small_disk: Path, tmp_path: Path) -> None:
    answers = tmp_path / "answers.yaml"  # long replies: every episode takes a few KiB of the store
    answers.write_text('policy:\n  repeat: "' + "I am looking into this for you right now. " * 50 + '"\n')
    ws = small_disk / "ws"
    db = ws / "gapforge.db"
    Store(f"sqlite:///{db}").close()  # the store exists; the run and its episodes are what meet the full disk
    filler = fill(small_disk, leave_kib=160)
    args = [
        "rollouts",
        "collect",
        "--env",
        "shop",
        "--policy",
        f"scripted:{answers}",
        "--tasks",
        LOOKUPS,
        "--samples",
        str(SAMPLES),
        "--concurrency",
        "2",
        "--set",
        f"workspace={ws}",
        "--set",
        "rollouts.max_turns=1",
    ]
    runner = CliRunner()
    first = runner.invoke(app, args)
    assert first.exit_code == 3, first.output
    run_id = run_id_in(first.output)
    errors = [line for line in first.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(db) in errors[0] and "no space left" in errors[0], first.output
    assert f"gapforge rollouts collect --run {run_id}" in errors[0] and "Traceback" not in first.output
    filler.unlink()  # space freed
    stored_before = {(e.task_id, e.sample) for e in _episodes(db, run_id)}
    assert len(stored_before) < 8 * SAMPLES  # the disk stopped the collection part-way
    again = runner.invoke(app, ["rollouts", "collect", "--run", run_id, "--set", f"workspace={ws}"])
    assert again.exit_code == 0, again.output
    stored = _episodes(db, run_id)
    keys = [(e.task_id, e.sample) for e in stored]
    assert len(keys) == len(set(keys)) == 8 * SAMPLES  # nothing lost, nothing twice
    assert stored_before <= set(keys)
    with Store(f"sqlite:///{db}") as s:
        assert s.get_run(run_id).status == "done"


class _Weights:
    """Writes a safetensors file of `n_bytes` of weights and an adapter config, as `save_pretrained` does."""

    def __init__(self, n_bytes: int) -> None:
        self.n_bytes = n_bytes

    def save_pretrained(self, out: str) -> None:
        import torch
        from safetensors.torch import save_file

        (Path(out) / "adapter_config.json").write_text(json.dumps({"r": 2, "peft_type": "LORA"}))
        save_file({"lora_A": torch.zeros(self.n_bytes // 4)}, str(Path(out) / "adapter_model.safetensors"))


def test_an_adapter_write_that_meets_enospc_leaves_nothing_read_back(small_disk: Path) -> None:
    final = small_disk / "adapters" / "run" / "cap" / "evals" / "step-000004"
    with complete_dir(final, "a held-out adapter") as tmp:
        _Weights(64 * 1024).save_pretrained(str(tmp))
    assert check_dir(final, required=("adapter_config.json",), deep=True) is None and (final / MANIFEST).is_file()
    filler = fill(small_disk, leave_kib=256)
    with pytest.raises(DiskFull) as caught, complete_dir(final, "a held-out adapter") as tmp:
        _Weights(4 * 1024 * 1024).save_pretrained(str(tmp))  # 4 MiB of weights into 256 KiB
    assert str(final) in str(caught.value) and "no space left" in str(caught.value)
    assert (
        check_dir(final, required=("adapter_config.json",), deep=True) is None
    )  # the adapter that was there is intact
    assert [p.name for p in final.parent.iterdir()] == [final.name]  # and the partial directory is gone
    filler.unlink()


def _job(out: Path, model_dir: Path, **kw):
    from gapforge.training.config import TrainingConfig
    from gapforge.training.envs import EnvSpec
    from gapforge.training.service import TrainJob

    cfg = TrainingConfig.tiny(
        max_steps=4,
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
        name="cap",
        capability="cap",
        base_model=str(model_dir),
        config=cfg,
        out_dir=str(out),
        env=EnvSpec(kind="python", factory="tests.training.toy_env:ToyDeskEnv"),
        **kw,
    )


@pytest.mark.slow
def test_training_on_a_full_disk_stops_resumably_and_a_cut_checkpoint_is_redone(
    small_disk: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A real GRPO job (tiny model, toy env) in its own process meets ENOSPC saving its step-0 held-out adapter:
    it exits 3, run_job raises DiskFull naming its directory, no adapter reads back and no failed adapter is
    recorded against the capability. With space freed it trains to the end; a checkpoint and a held-out adapter
    cut afterwards (as a full disk leaves them) are found on the next start and redone from the checkpoint before."""
    from gapforge.training.run import run_job
    from gapforge.training.service import train_capability

    out = small_disk / "adapters" / "r" / "cap"
    db = tmp_path / "gapforge.db"
    with Store(f"sqlite:///{db}") as s:
        run_id = s.create_run("trace", {})
    job = _job(out, tiny_model_dir, store_url=f"sqlite:///{db}", run_id=run_id)
    filler = fill(small_disk, leave_kib=8)  # selection.json fits, the adapter does not
    with pytest.raises(DiskFull) as caught:
        run_job(job, tmp_path / "specs")
    assert str(out) in str(caught.value)
    assert not list(out.glob("evals/step-*")) and not (out / "result.json").exists()
    with Store(f"sqlite:///{db}") as s:
        assert s.adapters(run_id) == []  # a full disk is not the capability's failure
    filler.unlink()

    result = train_capability(job)
    assert result.status == "done" and [e["step"] for e in result.curve] == [0, 2, 4]
    assert check_dir(Path(result.adapter_path), required=("adapter_config.json",), deep=True) is None

    # as a full disk leaves them: the last checkpoint's weights cut short, a held-out adapter cut in its header
    weights = out / "trl" / "checkpoint-4" / "adapter_model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    (out / "result.json").unlink()
    events: list[dict] = []
    again = train_capability(job, progress=events.append)
    redo = [e["reason"] for e in events if e.get("event") == "redo"]
    assert len(redo) == 1 and "checkpoint-4" in redo[0] and "truncated" in redo[0]
    stepped = [e["step"] for e in events if e.get("event") == "step"]
    assert stepped == [3, 4]  # resumed from checkpoint-2, the cut checkpoint's steps trained again
    assert again.status == "done" and [e["step"] for e in again.curve] == [0, 2, 4]
    assert check_dir(out / "trl" / "checkpoint-4", required=("trainer_state.json",)) is None
