"""The demo for several training seeds, one table: what `gapforge demo` measures, per GRPO seed.

For each seed: `gapforge demo --set training.seed=S` in a workspace of its own, so every stage is the demo's
own (the demo profile, gapforge/demo_profile.yaml): the recorded analyst retains the capabilities the base
lacks, each accepted synthetic env trains its adapter (GRPO + LoRA, the adapters in parallel processes), the
learned gate (routing.backend=gate) routes among them and `none`, and the evaluation plays the held-out split
(base, each adapter, routed TRACE; paired seeds). Collection, analysis and synthesis do not depend on
training.seed: only the adapters (and what follows from them) differ between seeds. Then from each run's store:

- per adapter: the kept step and its held-out synthetic reward before -> after (the selection seeds); with
  --test-seeds N, base vs the kept adapter on N synthetic TEST seeds nobody selected on, paired rollout by rollout;
- the gate's accuracy on its held-out examples, its agreement with oracle routing on the shop's held-out tasks,
  and oracle routing against routed TRACE and each single policy (evaluation.oracle);
- routed TRACE - base per family, and routed over each adapter alone and over all of them (evaluation.scaling),
  paired episode by episode with two-stage bootstrap 95% intervals;
- per split (the held-out split, and the unseen records when `evaluation.unseen_env` is set): TRACE − base,
  GRPO-on-target − base and TRACE − GRPO-on-target, over all tasks and per family, paired with 95% intervals;
- the run's stage times and the wall time of the seed.

    .venv/bin/python -m bench.effect [--seeds 0 1 2] [--test-seeds 32] [--out DIR] [--powered] [--set dotted.key=value ...]

Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from gapforge.evaluation import stats
from gapforge.evaluation.oracle import ORACLE_COMPARISON, policy_episodes
from gapforge.evaluation.scaling import SUBSETS_COMPARISON, gate_line
from gapforge.evaluation.summary import BASE, GRPO_TARGET, ROUTED, UNSEEN, points, scope_metrics
from gapforge.sandbox.config import SandboxConfig
from gapforge.store.db import Store
from gapforge.training.config import TrainingConfig
from gapforge.training.deprecations import quiet_library_deprecations
from gapforge.training.envs import EnvSpec, open_factory

ROOT = Path(__file__).resolve().parents[1]

DEMO_PROFILE = ROOT / "gapforge" / "demo_profile.yaml"  # data: read, not imported
RUN_DEMO = "import sys; from gapforge.cli import main; sys.argv[0] = 'gapforge'; sys.exit(main())"


def profile(overrides: list[str]) -> dict:
    """The demo profile's settings plus `overrides`, as a tree (each section is validated by its own class where used)."""
    tree: dict = {}
    for item in [*yaml.safe_load(DEMO_PROFILE.read_text())["settings"], *overrides]:
        key, raw = item.split("=", 1)
        node = tree
        *parents, leaf = key.strip().split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = yaml.safe_load(raw)
    return tree


def run_demo(work: Path, seed: int, overrides: list[str]) -> tuple[str, float, str]:
    """(run id, wall seconds, the demo's output) of `gapforge demo --set training.seed=SEED` in `work` (its workspace)."""
    work.mkdir(parents=True, exist_ok=True)
    sets = [a for s in [f"training.seed={seed}", *overrides] for a in ("--set", s)]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN_DEMO, "demo", *sets], cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (work / "demo.log").write_text(done.stdout + done.stderr)
    runs = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("run r-")]
    if done.returncode != 0 or not runs:
        raise SystemExit(f"seed {seed}: gapforge demo exited {done.returncode}; its output: {work / 'demo.log'}")
    return runs[-1], wall, done.stdout


def heldout_test(model: str, adapter: str, spec: EnvSpec, cfg: TrainingConfig, seeds: list[int]) -> dict:
    """Base vs adapter on synthetic test seeds, paired by (seed, sample): the mean reward difference and its interval."""
    from gapforge.training.evaluate import load_policy
    from gapforge.training.selection import evaluate_heldout

    make_env, close = open_factory(spec, pool_size=2)
    try:
        rewards = {}
        for name, adapter_dir in (("base", None), ("adapter", adapter)):
            m, tok = load_policy(model, adapter_dir)
            rewards[name] = evaluate_heldout(m, tok, make_env, seeds, cfg, eval_seed=cfg.seed)["rewards"]
    finally:
        close()
    k = cfg.heldout_samples

    def as_eps(rs: list[float]) -> dict:
        return {s: {i: (rs[j * k + i], rs[j * k + i] >= 0.999) for i in range(k)} for j, s in enumerate(seeds)}

    paired = stats.paired_episodes(as_eps(rewards["adapter"]), as_eps(rewards["base"]))
    return {
        "base": sum(rewards["base"]) / len(rewards["base"]),
        "adapter": sum(rewards["adapter"]) / len(rewards["adapter"]),
        "diff": paired["mean_reward"],
        "n": paired["episodes"],
    }


def _iv(iv: dict | None, scale: float = 1.0) -> str:
    if not iv or iv.get("value") is None:
        return "-"
    return f"{iv['value'] * scale:+.3f} [{iv['low'] * scale:+.3f}, {iv['high'] * scale:+.3f}]"


def read_run(work: Path, run_id: str, tree: dict, test_seeds: int) -> dict:
    """What the table shows of one seed's run, from its store (module doc)."""
    ws = work / ".gapforge"
    cfg = TrainingConfig(**{**tree.get("training", {})})
    sandbox = SandboxConfig(**tree.get("sandbox", {}))
    out: dict = {"adapters": {}}
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        model = store.get_run(run_id).config["config"]["policy"]["local_path"]
        for a in store.adapters(run_id):
            if a.status != "done" or not a.capability:
                continue
            row = {
                "kept": a.metrics.get("best_step"),
                "before": a.metrics.get("heldout_before"),
                "after": a.metrics.get("heldout_after"),
            }
            if test_seeds:
                path = Path(a.path) if Path(a.path).is_absolute() else work / a.path
                spec = EnvSpec(
                    kind="sandbox",
                    module=str(ws / "synthetic_envs" / run_id / f"{a.capability}.py"),
                    sandbox=sandbox.model_dump(mode="json"),
                )
                first = cfg.train_seeds + cfg.heldout_seeds
                row["test"] = heldout_test(
                    model, str(path), spec, cfg.model_copy(update={"seed": 0}), list(range(first, first + test_seeds))
                )
            out["adapters"][a.name] = row
        evals = scope_metrics(store, run_id)
        out["splits"] = {scope: split_table(store, run_id, scope) for scope in ("eval", UNSEEN)}
        out["families"] = {f: d for f, d in (evals.get("trace_routed", {}).get("vs_base_by_family") or {}).items()}
        out["base_rates"] = {
            f: s["pass_rate"]["value"] for f, s in (evals.get("base", {}).get("by_family") or {}).items()
        }
        router = store.get_evaluation(run_id, "router")
        out["gate"] = gate_line(router.metrics if router is not None else None)
        # the lines the demo prints (evaluation.registry)
        out["oracle"] = ORACLE_COMPARISON.lines(store, run_id, None)
        out["scaling"] = SUBSETS_COMPARISON.lines(store, run_id, None)
    return out


def split_table(store: Store, run_id: str, scope: str) -> dict:
    """One split's rows `<scope>:<policy>` (eval: the held-out split, unseen: evaluation.unseen_env) -> scope (all
    tasks, then each family) -> {TRACE − base, GRPO-on-target − base, TRACE − GRPO-on-target}: paired differences
    in pass rate with their 95% intervals ({} when the split was not played)."""
    rows = scope_metrics(store, run_id, scope)
    if BASE not in rows or ROUTED not in rows:
        return {}
    eps = {name: policy_episodes(store, rows[name]) for name in (BASE, ROUTED, GRPO_TARGET) if name in rows}
    family_of = {
        r.task_id: r.task_family or "-" for r in store.episodes(rows[BASE]["child_run"], env=rows[BASE].get("env"))
    }
    out: dict = {"env": rows[BASE].get("env"), "tasks": rows[BASE].get("tasks")}
    for where in ["all tasks", *sorted(set(family_of.values()))]:
        tasks = None if where == "all tasks" else {t for t, f in family_of.items() if f == where}
        pairs = {"TRACE − base": (ROUTED, BASE), "GRPO-on-target − base": (GRPO_TARGET, BASE)}
        pairs["TRACE − GRPO-on-target"] = (ROUTED, GRPO_TARGET)
        out[where] = {
            label: stats.paired_episodes(eps[a], eps[b], tasks=tasks, seed=0)
            for label, (a, b) in pairs.items()
            if a in eps and b in eps
        }
    return out


def print_split(scope: str, table: dict) -> None:
    if not table:
        return
    name = "held-out split" if scope == "eval" else "unseen records"
    print(f"{name} ({table['env']}, {table['tasks']} tasks):")
    for where, diffs in table.items():
        if where in ("env", "tasks"):
            continue
        cells = [
            f"{label} {points(d['pass_rate'])} ({d.get('episodes', 0)} pairs, {d.get('tasks', 0)} tasks)"
            for label, d in diffs.items()
            if (d.get("pass_rate") or {}).get("value") is not None
        ]
        print(f"  {where}: " + "; ".join(cells))


def print_seed(seed: int, run_id: str, wall: float, r: dict, stage_line: str) -> None:
    print(f"\n== seed {seed}: run {run_id}, {wall / 60:.1f} min wall", flush=True)
    for name, a in r["adapters"].items():
        test = a.get("test")
        extra = (
            f"; synthetic test seeds base {test['base']:.3f} -> {test['adapter']:.3f}, paired {_iv(test['diff'])} n={test['n']}"
            if test
            else ""
        )
        print(f"adapter {name}: kept step {a['kept']}, held-out synthetic {a['before']:.3f} -> {a['after']:.3f}{extra}")
    for f, d in sorted(r["families"].items()):
        pr = d.get("pass_rate") or {}
        base = r["base_rates"].get(f)
        print(
            f"{f}: base {base:.1%}; TRACE − base {points(pr) if pr.get('value') is not None else '-'} ({d.get('episodes', 0)} pairs)"
        )
    for scope, table in r["splits"].items():
        print_split(scope, table)
    for line in [*r["gate"], *r["oracle"], *r["scaling"]]:
        print(line)
    if stage_line:
        print(stage_line)


def main() -> None:
    quiet_library_deprecations()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training.seed of each demo run")
    ap.add_argument(
        "--test-seeds",
        type=int,
        default=32,
        help="synthetic test seeds per adapter (x training.heldout_samples); 0: skip",
    )
    ap.add_argument(
        "--out", default=None, help="work directory, one workspace per seed under it (default: a temporary one)"
    )
    ap.add_argument(
        "--set", dest="overrides", action="append", default=[], help="extra demo overrides (dotted.key=value)"
    )
    ap.add_argument(
        "--powered", action="store_true", help="the demo profile's powered settings (gapforge demo --powered)"
    )
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gapforge-effect-"))
    if args.powered:
        args.overrides = [*yaml.safe_load(DEMO_PROFILE.read_text())["powered"], *args.overrides]
    tree = profile(args.overrides)
    print(f"bench/effect.py: gapforge demo per training seed {args.seeds}; work dir {out}", flush=True)
    for seed in args.seeds:
        work = out / f"seed-{seed}"
        run_id, wall, text = run_demo(work, seed, args.overrides)
        stage_line = next((line for line in text.splitlines() if line.startswith("stage times")), "")
        print_seed(seed, run_id, wall, read_run(work, run_id, tree, args.test_seeds), stage_line)


if __name__ == "__main__":
    main()
