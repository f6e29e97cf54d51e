"""GRPO on the target at several learning rates and at twice the budget, on a finished run (e.g. a demo's).

TRACE's adapters train with a learning rate chosen for them (the demo's 4e-3); the GRPO-on-target baseline trains
with the same settings, so a worse baseline could be a setting tuned for TRACE rather than the method. For each
learning rate (default: the run's, half and twice it) this trains the baseline as the run's `train_baseline` does
(the analysis split's tasks, training.budget.baseline_tasks, the training rollouts of all the run's adapters:
training.budget.training_rollout_budget), and one more row at `--scale` x that budget with the run's rate. Each
adapter (its own held-out selection, as in the run) then plays the run's held-out split with the run's trials
(family_trials, min_family_episodes) beside the base, every policy on the same (task, trial) seeds; paired
differences to the base with two-stage bootstrap 95% intervals (evaluation.stats). Times per row.

    .venv/bin/python -m bench.baseline_lr --workspace DIR --run RUN [--lr 2e-3 4e-3 8e-3] [--scale 2] [--out DIR]

Prints numbers; it does not pass or fail. Offline targets with the scripted user only.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from gapforge.envs.registry import make_env
from gapforge.evaluation.config import EvaluationConfig
from gapforge.evaluation.run import EvalPlan, evaluate
from gapforge.serving.multi_adapter import MultiAdapterModel
from gapforge.store.db import Store
from gapforge.training.budget import baseline_settings, baseline_steps, baseline_tasks, training_rollout_budget
from gapforge.training.config import TrainingConfig
from gapforge.training.deprecations import quiet_library_deprecations
from gapforge.training.envs import EnvSpec
from gapforge.training.service import TrainJob, train_capability


def _run_settings(store: Store, run_id: str) -> dict:
    stored = store.get_run(run_id).config or {}
    stored = stored.get("config", stored)  # a graph run stores {command, config, graph, target}
    if (stored.get("rollouts") or {}).get("user", "scripted") != "scripted":
        raise SystemExit(f"run {run_id} plays an LLM user: this bench plays the scripted user only (offline)")
    return stored


def main() -> None:
    quiet_library_deprecations()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", required=True, help="the run's workspace (its gapforge.db)")
    ap.add_argument("--run", required=True)
    ap.add_argument(
        "--lr", type=float, nargs="+", default=None, help="learning rates (default: the run's, half and twice it)"
    )
    ap.add_argument(
        "--scale", type=float, default=2.0, help="the larger-budget row: this many times the adapters' budget"
    )
    ap.add_argument("--out", default=None, help="where the adapters go (default: a temporary directory)")
    args = ap.parse_args()
    store = Store(f"sqlite:///{Path(args.workspace, 'gapforge.db').resolve()}")
    stored = _run_settings(store, args.run)
    tcfg = TrainingConfig.model_validate(stored.get("training") or {})
    ecfg = EvaluationConfig.model_validate(stored.get("evaluation") or {})
    cfg = argparse.Namespace(training=tcfg)
    split = store.get_split(args.run)
    adapters = [a for a in store.adapters(args.run) if a.capability and a.status == "done"]
    if split is None or not adapters:
        raise SystemExit(
            f"run {args.run} has no split or no trained capability adapter: run the demo (or gapforge run) first"
        )
    model = (stored.get("policy") or {}).get("local_path")
    rates = args.lr or [tcfg.learning_rate / 2, tcfg.learning_rate, tcfg.learning_rate * 2]
    variants = [(f"lr {lr:g}", lr, 1.0) for lr in rates] + [
        (f"lr {tcfg.learning_rate:g}, {args.scale:g}x budget", tcfg.learning_rate, args.scale)
    ]
    out = Path(args.out or tempfile.mkdtemp(prefix="gapforge-baseline-lr-"))
    train_tasks, held = baseline_tasks(split.analysis_tasks, cfg.training.heldout_seeds)
    print(
        f"run {args.run}: {len(adapters)} adapter(s), budget {training_rollout_budget(cfg, len(adapters))} training rollouts "
        f"({baseline_steps(cfg, len(adapters))} steps x {tcfg.rollouts_per_step}); {len(train_tasks)} training / {len(held)} selection "
        f"tasks of {split.env}; out {out}",
        flush=True,
    )

    trained: dict[str, tuple[str, dict]] = {}
    for label, lr, scale in variants:
        steps = baseline_steps(cfg, len(adapters), scale=scale)
        job = TrainJob(
            name=f"grpo-{len(trained)}",
            capability=None,
            base_model=model,
            out_dir=str(out / f"grpo-{len(trained)}"),
            env=EnvSpec(kind="target", target=split.env, train_tasks=train_tasks, heldout_tasks=held),
            config=baseline_settings(cfg, len(held), len(adapters), scale=scale, learning_rate=lr),
        )  # the graph's settings
        assert job.config.max_steps == steps
        t0 = time.perf_counter()
        res = train_capability(job)
        info = {
            "steps": res.steps,
            "rollouts": res.steps * tcfg.rollouts_per_step,
            "kept": res.best_step,
            "train_s": time.perf_counter() - t0,
            "selection": (res.heldout_before, res.heldout_after),
        }
        trained[label] = (res.adapter_path, info)
        print(
            f"{label}: {info['steps']} steps ({info['rollouts']} rollouts) in {info['train_s']:.0f} s, kept step {res.best_step} "
            f"(selection reward {res.heldout_before:.3f} -> {res.heldout_after:.3f})",
            flush=True,
        )

    t0 = time.perf_counter()
    result = asyncio.run(_evaluate(args, stored, ecfg, model, split, trained, out))
    eval_s = time.perf_counter() - t0
    print(f"\nheld-out split of {split.env}: {len(split.heldout_tasks)} tasks; evaluation {eval_s:.0f} s", flush=True)
    print("| baseline | training rollouts | train s | kept step | pass rate | − base (paired) | N pairs |")
    print("|---|---|---|---|---|---|---|")
    base = result.get("base").metrics
    print(f"| base | 0 | – | – | {_pct(base['pass_rate'])} | – | – |")
    for i, (label, (_, info)) in enumerate(trained.items()):
        m = result.get(f"grpo-{i}").metrics
        d = m["vs_base_paired"]
        print(
            f"| {label} | {info['rollouts']} | {info['train_s']:.0f} | {info['kept']} | {_pct(m['pass_rate'])} | "
            f"{_pct(d['pass_rate'], signed=True)} | {d['episodes']} |"
        )


def _pct(iv: dict, signed: bool = False) -> str:
    f = "{:+.1f}" if signed else "{:.1f}"
    return f"{f.format(100 * iv['value'])} [{f.format(100 * iv['low'])}, {f.format(100 * iv['high'])}]"


async def _evaluate(args, stored: dict, ecfg: EvaluationConfig, model: str, split, trained: dict, out: Path):
    """Base and every trained baseline on the run's held-out split (a store of this bench's own, under `out`)."""
    policy, rollouts = stored.get("policy") or {}, stored.get("rollouts") or {}
    paths = {f"grpo-{i}": path for i, (path, _) in enumerate(trained.values())}
    backend = MultiAdapterModel(
        model, paths, max_new_tokens=int(policy.get("max_new_tokens", 512)), seed=int(stored.get("seed", 0))
    )
    temperature = float(policy.get("temperature", 1.0))
    policies = {"base": backend.policy(None, temperature=temperature, name="base")}
    policies.update({name: backend.policy(name, temperature=temperature, name=name) for name in paths})
    probe = make_env(split.env)
    families = {t: probe.task_family(t) for t in split.heldout_tasks}
    probe.close()
    plan = EvalPlan(
        "baseline-lr",
        split.env,
        list(split.heldout_tasks),
        trials=ecfg.trials,
        max_turns=int(rollouts.get("max_turns", 30)),
        temperature=temperature,
        concurrency=int(rollouts.get("concurrency", 4)),
        seed=int(stored.get("seed", 0)),
        family_trials=ecfg.family_trials,
        family_trials_policies=("base", *paths),
        min_family_episodes=ecfg.min_family_episodes,
    )
    with Store(f"sqlite:///{(out / 'bench.db').resolve()}") as bench_store:
        bench_store.create_run(
            "evaluation", {"bench": "baseline_lr", "run": args.run}, run_id="baseline-lr", exist_ok=True
        )
        return await evaluate(
            bench_store, plan, make_env=lambda: make_env(split.env), policies=policies, families=families
        )


if __name__ == "__main__":
    main()
