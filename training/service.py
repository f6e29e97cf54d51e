"""The training stage service: `train_capability(job) -> TrainResult` (plain function, no printing).

One call trains one LoRA adapter with GRPO on one env, selects the best
checkpoint on held-out seeds, saves it in PEFT format with a metadata file and
registers it in the store. Re-running a killed job resumes from its last TRL
checkpoint; re-running a finished job returns the saved result.

Nothing half-written is read back: adapters are written whole or not at all
(store.files.complete_dir), result.json and the metadata file by rename; on a
re-run a TRL checkpoint or a held-out adapter that does not read back whole
(cut by a full disk or a kill) is removed with every step after it, and the
job resumes from the last whole checkpoint before it (`_invalidate_damaged`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gapforge.store.files import check_dir, remove_partials, write_text
from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec, open_factory, task_split

METADATA_FILE = "gapforge_adapter.json"


class TrainJob(BaseModel):
    """Everything one training process needs (also the JSON spec of `python -m gapforge.training.run`)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="adapter name, unique in the run (the capability, or e.g. grpo_on_target)")
    capability: str | None = None
    base_model: str = Field(description="directory of the Hugging Face base model")
    env: EnvSpec
    config: TrainingConfig = Field(default_factory=TrainingConfig)
    out_dir: str
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads of the job's process (None: the machine's "
        "free cores); set when several jobs share the CPU, so they do not oversubscribe it",
    )
    threads_file: str | None = Field(
        None,
        description="a file the launcher may rewrite with the torch threads this job is to use "
        "from its next step on (local jobs sharing a CPU get the cores a finished job leaves)",
    )
    tracking_dir: str | None = Field(
        None, description="where its tensorboard events go with training.report_to (<workspace>/tracking/RUN/NAME)"
    )
    store_url: str | None = Field(
        None,
        exclude=True,
        description="never written to the spec file (it may hold a password): "
        "training.run passes it to the job's process in STORE_URL_ENV",
    )
    run_id: str | None = None


class TrainResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    capability: str | None
    status: str  # done | failed
    adapter_path: str | None
    steps: int
    best_step: int | None
    heldout_before: float | None
    heldout_after: float | None
    curve: list[dict[str, Any]]
    stopped_early: bool = False
    curve_adapters: list[dict[str, Any]] = Field(
        default_factory=list,
        description="[{step, training_rollouts, path}]: the adapters kept for a rollout-scaling curve (training.curve)",
    )
    wall_s: float = 0.0
    user_tokens: tuple[int, int] = Field(
        (0, 0), description="prompt, completion tokens an LLM user simulator spent in this job's rollouts (pricing)"
    )
    cpu_s: float = Field(0.0, description="CPU seconds of the job's process (user + system), this call's")
    cpu_threads: int | None = (
        None  # torch threads the process started with (transformers generation; a launcher may raise it: threads_file)
    )
    error: str | None = None


def model_hash(path: str | Path) -> str:
    """sha256 over the base model's config and weight files (names + bytes)."""
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.suffix in (".json", ".safetensors", ".bin") and f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate", "datasets"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _step(path: Path) -> int:
    return int(path.name.rsplit("-", 1)[1])


def _last_checkpoint(out: Path) -> tuple[str | None, int]:
    ckpts = sorted(out.glob("trl/checkpoint-*"), key=_step)
    return (str(ckpts[-1]), _step(ckpts[-1])) if ckpts else (None, 0)


def _invalidate_damaged(out: Path) -> tuple[int | None, list[str]]:
    """Before a (re)start: remove what a dead writer left half-written, so the job resumes from whole files only.

    A TRL checkpoint or a held-out adapter (`evals/step-N`) that does not read back whole (store.files.check_dir)
    is removed together with every checkpoint and held-out adapter at or after its step: TRL then resumes from
    the last whole checkpoint before it, and the held-out curve from that step on is dropped, so those steps are
    trained and evaluated again. Returns (that first step or None, what was wrong)."""
    import shutil

    remove_partials(out / "trl")
    remove_partials(out / "evals")
    remove_partials(out / "curve")
    found: list[tuple[int, str]] = []
    for ckpt in out.glob("trl/checkpoint-*"):
        if problem := check_dir(ckpt, required=("trainer_state.json",)):
            found.append((_step(ckpt), problem))
    for adapter in out.glob("evals/step-*"):
        if problem := check_dir(adapter, required=("adapter_config.json",)):
            found.append((_step(adapter), problem))
    if not found:
        return None, []
    first = min(step for step, _ in found)
    for d in [*out.glob("trl/checkpoint-*"), *out.glob("evals/step-*")]:
        if _step(d) >= first:
            shutil.rmtree(d, ignore_errors=True)
    return first, [problem for _, problem in sorted(found)]


TRAINING_STATE = ("result.json", "trl", "evals", "curve", "selection.json", "steps.jsonl")


def finished_result(out: Path) -> TrainResult | None:
    """The saved result of a finished job whose adapter reads back whole (deep: sha256 too); None means train.
    A finished job whose adapter is damaged (the other held-out adapters are pruned by then, so no earlier step
    can be selected again) is trained again from the start: its training state is removed."""
    import shutil

    done = out / "result.json"
    if not done.is_file():
        return None
    try:
        result: TrainResult | None = TrainResult.model_validate_json(done.read_text())
    except ValueError:  # cut mid-write (before result.json was written by rename)
        result = None
    if result is not None and not (
        result.adapter_path and check_dir(Path(result.adapter_path), required=("adapter_config.json",), deep=True)
    ):
        return result
    for name in TRAINING_STATE:
        path = out / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return None


def train_capability(job: TrainJob, progress: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train (or resume, or return the finished result of) one adapter. Raises on bad input only;
    env failures inside rollouts are zero-reward rollouts, recorded in the step log."""
    out = Path(job.out_dir)
    done = out / "result.json"
    if (finished := finished_result(out)) is not None:
        return finished
    out.mkdir(parents=True, exist_ok=True)
    redo_from, problems = _invalidate_damaged(out)
    for problem in problems:
        if progress is not None:
            progress({"event": "redo", "reason": problem})
    cfg = job.config
    t0, cpu0 = time.perf_counter(), time.process_time()
    train_tasks, heldout_tasks = task_split(job.env, cfg.train_seed_list(), cfg.heldout_seed_list())
    # a GRPO step and a held-out evaluation each open all their envs at once (run_groups): keep that many sandboxes warm
    # (~10 MB each idle), or every step would start the rest cold and kill them after (~0.12 s each here). The pool
    # starts them in the background from here, while torch / transformers / TRL import (~9 s): the step-0 held-out
    # evaluation, the first to open them all, took 23 s with the pool opened after the imports and 14 s warm.
    rows = max(cfg.rollouts_per_step, len(heldout_tasks) * cfg.heldout_samples)
    make_env, close_envs = open_factory(job.env, pool_size=rows)
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from gapforge.training.curve import curve_adapters, curve_callback, drop_after, save_curve_adapter
        from gapforge.training.grpo import RolloutRecorder, build_trainer
        from gapforge.training.rollout import USER_TOKENS_SPENT
        from gapforge.training.selection import HeldoutSelector, evaluate_heldout
        from gapforge.training.template_check import prepare_tokenizer

        spent = list(USER_TOKENS_SPENT)  # a process may train several jobs (bench scripts): this job's share

        threads = None
        if cfg.generation == "transformers":
            from gapforge.training.cpu import set_cpu_threads

            threads = set_cpu_threads(job.cpu_threads)
        tokenizer = AutoTokenizer.from_pretrained(job.base_model, local_files_only=True)
        probe = make_env()
        try:
            prepare_tokenizer(
                tokenizer, probe.tools()
            )  # the family's training template, probed (TemplateDriftError names the fix)
        finally:
            probe.close()
        model = AutoModelForCausalLM.from_pretrained(job.base_model, local_files_only=True)
        recorder = RolloutRecorder()
        selector = HeldoutSelector(
            out,
            lambda m: evaluate_heldout(m, tokenizer, make_env, heldout_tasks, cfg, eval_seed=cfg.seed),
            cfg,
            progress,
        )
        callbacks: list[Any] = [
            selector,
            _progress_callback(recorder, out / "steps.jsonl", progress),
            curve_callback(out, cfg),
        ]
        if job.threads_file and threads is not None:
            callbacks.append(_threads_callback(Path(job.threads_file), threads))
        from gapforge.training.tracking import trainer_tracking

        report_to, track_args, track_callbacks = trainer_tracking(cfg.report_to, job.tracking_dir, job.run_id, job.name)
        trainer = build_trainer(
            model,
            tokenizer,
            make_env,
            train_tasks,
            cfg,
            str(out / "trl"),
            recorder,
            [*callbacks, *track_callbacks],
            tracking=(report_to, track_args),
        )
        checkpoint, resume_step = _last_checkpoint(out)
        selector.load(resume_step)
        if redo_from is not None:  # step 0 itself cut: no checkpoint is left before it, and load keeps step 0's entry
            selector.curve = [e for e in selector.curve if e["step"] < redo_from]
        _trim_steps(out / "steps.jsonl", resume_step)
        drop_after(out, resume_step)  # the scaling curve's adapters of the steps trained again (training.curve)
        if resume_step == 0:
            selector.record(0, trainer.model)  # the base policy (a fresh LoRA adapter is the identity)
            save_curve_adapter(out, 0, trainer.model, cfg)
        trainer.train(resume_from_checkpoint=checkpoint)
        steps = trainer.state.global_step
        if not any(e["step"] == steps for e in selector.curve):
            selector.record(steps, trainer.model)
        best_dir = selector.prune()
    finally:
        close_envs()
    best = selector.best or {}
    result = TrainResult(
        name=job.name,
        capability=job.capability,
        status="done",
        adapter_path=str(best_dir) if best_dir else None,
        steps=steps,
        best_step=best.get("step"),
        heldout_before=selector.curve[0]["reward"] if selector.curve else None,
        heldout_after=best.get("reward"),
        curve=selector.curve,
        stopped_early=selector.stopped_early,
        curve_adapters=[
            {"step": k, "fraction": k / cfg.max_steps, "training_rollouts": k * cfg.rollouts_per_step, "path": str(d)}
            for k, d in curve_adapters(out).items()
        ],
        wall_s=time.perf_counter() - t0,
        user_tokens=(USER_TOKENS_SPENT[0] - spent[0], USER_TOKENS_SPENT[1] - spent[1]),
        cpu_s=round(time.process_time() - cpu0, 3),
        cpu_threads=threads,
    )
    if best_dir is not None:
        meta = {
            "name": job.name,
            "capability": job.capability,
            "base_model": str(Path(job.base_model).resolve()),
            "base_model_sha256": model_hash(job.base_model),
            "env": job.env.model_dump(mode="json"),
            "env_module_sha256": job.env.module_sha256(),
            "steps": steps,
            "best_step": result.best_step,
            "train_tasks": train_tasks,
            "heldout_tasks": heldout_tasks,
            "heldout_curve": selector.curve,
            "config": cfg.model_dump(mode="json"),
            "versions": _versions(),
        }
        write_text(best_dir / METADATA_FILE, json.dumps(meta, indent=1), "the adapter's metadata")
    write_text(done, result.model_dump_json(indent=1), "the training result")
    register(job, result)
    return result


def register(job: TrainJob, result: TrainResult) -> None:
    """Upsert the adapter row (keyed by run + name: a re-run never duplicates it)."""
    if not (job.store_url and job.run_id):
        return
    from gapforge.store.db import Store

    metrics = {
        k: v
        for k, v in result.model_dump(mode="json").items()
        if k not in ("name", "capability", "adapter_path", "status")
    }
    from gapforge.store.errors import StoreError

    row = {"path": result.adapter_path or "", "status": result.status}
    with Store(job.store_url) as store:
        try:
            store.put_adapter(job.run_id, job.name, metrics=metrics, capability=job.capability, **row)
        except StoreError:  # the capability is not in this run's analysis (e.g. trained on an example module)
            metrics = {**metrics, "capability_not_in_run": job.capability}
            store.put_adapter(job.run_id, job.name, metrics=metrics, capability=None, **row)


def _trim_steps(path: Path, resume_step: int) -> None:
    """A resumed job replays the steps after its checkpoint: drop their old log lines."""
    if path.is_file():
        rows = [
            r
            for r in path.read_text().splitlines()
            if (row := _json_line(r)) is not None and row["step"] <= resume_step
        ]
        write_text(path, "".join(r + "\n" for r in rows), "the step log")


def _json_line(line: str) -> dict[str, Any] | None:
    """A whole step-log line, or None (blank, or cut by a full disk or a kill)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and "step" in row else None


def read_threads(path: Path) -> int | None:
    """The thread count a launcher wrote to `path` (None: no file, or not a count >= 1, e.g. caught mid-write)."""
    try:
        n = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return n if n >= 1 else None


def _threads_callback(path: Path, threads: int):
    """Before every step: the torch threads the launcher last wrote to `path` (TrainJob.threads_file). The
    sampler decodes and TRL computes the loss on this thread, and so does the held-out evaluation after a step."""
    import torch
    from transformers import TrainerCallback

    class _Threads(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            n = read_threads(path) or threads
            if n != torch.get_num_threads():
                torch.set_num_threads(n)

    return _Threads()


def _progress_callback(recorder: Any, log_path: Path, progress: Callable[[dict[str, Any]], None] | None):
    """Every step: one line in steps.jsonl (reward, informative-group share, env failures, rollouts dropped from the loss, timings)."""
    from transformers import TrainerCallback

    class _Progress(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if not recorder.steps:
                return
            s = recorder.steps[-1]
            row = {
                "event": "step",
                "step": state.global_step,
                "max_steps": state.max_steps,
                "reward": s.reward,
                "informative_share": s.informative_share,
                "failures": s.failures,
                "gen_s": s.gen_s,
                "env_s": s.env_s,
                "wall_s": s.wall_s,
                "rollouts": s.rollouts,
                "malformed_turns": s.malformed_turns,
                "dropped_env": s.dropped_env,
                "dropped_infra": s.dropped_infra,
            }
            with log_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if progress is not None:
                progress(row)

    return _Progress()
