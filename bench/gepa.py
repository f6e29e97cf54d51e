"""GEPA, the prompt-optimisation baseline, on a finished offline demo run: the shipped tiny policy's system
prompt optimised on the run's analysis split at TRACE's training-rollout budget (the recorded reflection LM,
agents/recorded/shop_reflection.yaml, stands in for the `llm` endpoint), then evaluated on the held-out split
beside the base and the unoptimised capability hints, every policy on the same (task, trial) seeds (the planted
family with the run's family_trials for all three), with paired differences to the base and their 95% intervals.

Works on a copy of the run's store (the run's workspace is left as it was); the GEPA prompt is stored with the run
there, and the three policies play under a new run of the copy (the base too: the weights loaded here are the
shipped policy's, which may differ from those the run was made with).

    .venv/bin/python -m bench.gepa [--workspace /tmp/demo-last/.gapforge] [--run RUN_ID] [--max-metric-calls N] [--family-trials K]

The shipped ~1M-parameter policy does not read its prompt (its chat template shows it only the tool signatures in
place of the system message): expect "no effect", printed as such whenever the interval contains 0. Measured:
docs/evaluation.md (GEPA). Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from gapforge.agents.config import LLMConfig, PolicyConfig, RolloutConfig
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.envs.registry import make_env
from gapforge.evaluation.comparisons import CAPABILITY_HINTS, HINTS_COMPARISON, Evaluation
from gapforge.evaluation.config import EvaluationConfig
from gapforge.evaluation.gepa_baseline import GEPA, GEPA_COMPARISON, gepa_budget, gepa_label
from gapforge.evaluation.run import EvalPlan, evaluate
from gapforge.evaluation.service import RunArtifacts, load_backend, run_artifacts
from gapforge.evaluation.summary import verdict
from gapforge.store.db import Store
from gapforge.training.budget import training_rollout_budget
from gapforge.training.config import TrainingConfig


def _cfg(stored: dict, max_metric_calls: int | None) -> SimpleNamespace:
    """The sections GEPA and the evaluation read, from the run's stored config (bench/ does not import gapforge/)."""
    known = set(EvaluationConfig.model_fields)
    evaluation = EvaluationConfig(
        **{k: v for k, v in stored["evaluation"].items() if k in known}, gepa_max_metric_calls=max_metric_calls
    )
    return SimpleNamespace(
        seed=stored["seed"],
        training=TrainingConfig(**stored["training"]),
        rollouts=RolloutConfig(**stored["rollouts"]),
        policy=PolicyConfig(**stored["policy"]),
        llm=LLMConfig(**stored["llm"]),
        evaluation=evaluation,
    )


async def _not_here(*args: object, **kwargs: object) -> None:
    raise AssertionError("GEPA's prepare step plays through its own adapter, never the stage's evaluation")


def _pts(iv: dict | None) -> str:
    if not iv or iv.get("value") is None:
        return "–"
    return f"{iv['value'] * 100:+.1f} [{iv['low'] * 100:+.1f}, {iv['high'] * 100:+.1f}]"


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="gepa-bench-"))
    shutil.copy(Path(args.workspace) / "gapforge.db", work / "gapforge.db")
    store = Store(f"sqlite:///{work / 'gapforge.db'}")
    run = store.get_run(args.run) if args.run else next(r for r in reversed(store.list_runs()) if "." not in r.id)
    cfg, split = _cfg(run.config["config"], args.max_metric_calls), store.get_split(run.id)
    artifacts = run_artifacts(store, run.id, workspace=Path(args.workspace))
    n_adapters = len(artifacts.adapter_paths)
    print(
        f"run {run.id} ({args.workspace}, store copied to {work}); env {split.env}: {len(split.analysis_tasks)} analysis tasks, "
        f"{len(split.heldout_tasks)} held-out; capabilities {[c['name'] for c in artifacts.capabilities]} ({n_adapters} adapters)"
    )
    trace = training_rollout_budget(cfg, n_adapters)
    print(
        f"budget: {gepa_budget(cfg, n_adapters)} metric calls; TRACE's training rollouts: {trace} ({n_adapters} adapters x "
        f"{cfg.training.max_steps} steps x {cfg.training.rollouts_per_step} rollouts), the default"
    )
    backend = load_backend(
        cfg.policy.local_path if Path(cfg.policy.local_path or "").is_dir() else SHOP_POLICY_DIR,
        RunArtifacts(run.id, artifacts.capabilities),
        max_new_tokens=cfg.policy.max_new_tokens,
        seed=cfg.seed,
    )
    base = backend.policy(None, temperature=cfg.policy.temperature, name="base")
    make = lambda: make_env(split.env)  # noqa: E731
    families = dict(split.families)
    heldout = list(split.heldout_tasks)
    ev = Evaluation(  # what the evaluate stage gives a comparison; this bench plays its own evaluation below
        store,
        run.id,
        cfg,
        split.env,
        make,
        heldout,
        {t: families[t] for t in heldout},
        split,
        artifacts,
        backend,
        None,
        str(SHOP_POLICY_DIR),
        given=False,
        progress=lambda line: None,
        play=_not_here,
    )
    t0 = time.perf_counter()
    # the evaluate stage's GEPA step: the run's stored prompt at this budget, else GEPA on the analysis split
    record = await GEPA_COMPARISON.prepare(ev)
    t_gepa = time.perf_counter() - t0
    added = [line for line in record.prompt.splitlines() if line not in record.seed_prompt.splitlines()]
    print(
        f"\nGEPA ({record.gepa_version}): {record.metric_calls} of {record.max_metric_calls} metric calls, {record.candidates} candidates, "
        f"{record.reflection_calls} reflection calls (recorded answers), {t_gepa:.0f} s"
    )
    print(
        f"  analysis-split mean reward (what GEPA selects on, not held out): seed {record.seed_score:.3f} -> best {record.best_score:.3f}"
    )
    print(
        "  lines the optimised prompt adds to the seed (capability hints):"
        + ("".join(f"\n    {a}" for a in added) or " none")
    )

    caps, temperature = artifacts.capabilities, cfg.policy.temperature
    policies = {  # the base and the two prompt baselines, as the evaluate stage's plug-ins add them
        "base": base,
        **HINTS_COMPARISON.policies(base, backend, caps, temperature, None),
        **GEPA_COMPARISON.policies(base, backend, caps, temperature, record),
    }
    e = cfg.evaluation
    family_trials = {e.focus_family: args.family_trials} if args.family_trials and e.focus_family else e.family_trials
    # a fresh run for the evaluation: the base plays again with the weights loaded here (the run's stored base
    # episodes may come from other weights), on the same (task, trial) seeds as the prompt policies
    bench_run = store.create_run("evaluation", {"bench": "gepa", "of": run.id})
    plan = EvalPlan(
        bench_run,
        split.env,
        heldout,
        trials=e.trials,
        max_turns=cfg.rollouts.max_turns,
        temperature=cfg.policy.temperature,
        concurrency=cfg.rollouts.concurrency,
        seed=cfg.seed,
        family_trials=family_trials,
        family_trials_policies=("base", CAPABILITY_HINTS, GEPA),
        focus_family=e.focus_family,
    )
    t0 = time.perf_counter()
    result = await evaluate(store, plan, make_env=make, policies=policies, families=ev.families)
    print(
        f"\nheld-out evaluation ({time.perf_counter() - t0:.0f} s): paired difference to the base, points of pass rate [95% interval]"
    )
    labels = {CAPABILITY_HINTS: "capability hints (unoptimised)", GEPA: gepa_label(record)}
    for name in (CAPABILITY_HINTS, GEPA):
        m = result.get(name).metrics
        d = m["vs_base_paired"]
        print(
            f"  {labels[name]}: pass rate {m['pass_rate']['value']:.1%}; all tasks {_pts(d['pass_rate'])} over {d['episodes']} pairs: "
            f"{verdict(d['pass_rate'])}"
        )
        for fam, fd in sorted((m.get("vs_base_by_family") or {}).items()):
            print(f"    {fam}: {_pts(fd['pass_rate'])} over {fd['episodes']} pairs: {verdict(fd['pass_rate'])}")
    print(f"  base: pass rate {result.get('base').metrics['pass_rate']['value']:.1%}")
    await backend.aclose()
    store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--workspace",
        default="/tmp/demo-last/.gapforge",
        help="a finished demo run's workspace (its gapforge.db is copied)",
    )
    p.add_argument("--run", default=None, help="run id (default: the store's latest top-level run)")
    p.add_argument(
        "--max-metric-calls", type=int, default=None, help="GEPA's budget (default: TRACE's training rollouts)"
    )
    p.add_argument(
        "--family-trials",
        type=int,
        default=None,
        help="trials per task of the run's focus family (default: the run's family_trials)",
    )
    asyncio.run(main(p.parse_args()))
