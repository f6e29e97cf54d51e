"""Rollout-scaling curves (the paper's Fig. 4) on the offline demo: pass rate against training rollouts for routed
TRACE and GRPO on the target at the same budget, for several training seeds.

For each training seed: one `gapforge demo` run (its own process, its own workspace under --out) with the GRPO-on-target
baseline on, every family powered (evaluation.min_family_episodes), early stopping off (training.early_stopping=false,
so every adapter trains to max_steps) and the scaling curve on (rollout_scaling in evaluation.comparisons: routed TRACE
and GRPO-on-target evaluated at the fractions 0, 1/4, 1/2, 3/4, 1 of their training, each paired with the run's base episodes). Then
from each run's store (evaluation.rollout_scaling): the table per seed with the TRACE − GRPO-on-target verdict at each
budget (TRACE ahead / tied / GRPO ahead, from the paired 95% interval), the points gained per 1,000 training rollouts
for each, and one plot of every seed's curves with their 95% bands.

    .venv/bin/python -m bench.scaling [--seeds 0 1 2] [--out DIR] [--plot docs/experiments/rollout_scaling.png] [--set k=v ...]

Prints numbers (and the wall time of each demo run); it does not pass or fail.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gapforge.evaluation.rollout_scaling import per_1000, run_curve_points, scaling_plot, scaling_rows, scaling_table
from gapforge.store.db import Store

ROOT = Path(__file__).resolve().parents[1]

CURVE = [
    "evaluation.min_family_episodes=40",
    "training.early_stopping=false",
    "evaluation.comparisons=[baseline_grpo_target, rollout_scaling]",
]


def demo_run(seed: int, workspace: Path, extra: list[str]) -> tuple[str, float, str]:
    """One demo run with the curve settings and training seed `seed`: (run id, wall seconds, its output)."""
    sets = [*CURVE, f"training.seed={seed}", f"workspace={workspace}", *extra]
    cmd = [
        sys.executable,
        "-c",
        "import sys; from gapforge.cli import main; sys.argv[0] = 'gapforge'; sys.exit(main())",
        "demo",
    ]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    runs = re.findall(r"^run (r-[\w-]+)\s*$", proc.stdout, flags=re.M)
    if proc.returncode != 0 or not runs:
        sys.exit(
            f"seed {seed}: the demo ended with exit code {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return runs[-1], wall, proc.stdout


def rows_of(workspace: Path, run_id: str) -> list[dict]:
    with Store(f"sqlite:///{(workspace / 'gapforge.db').resolve()}") as store:
        return scaling_rows(store, run_id, run_curve_points(store.adapters(run_id)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (training.seed)")
    ap.add_argument(
        "--out", default=None, help="one workspace per seed under this directory (default: a temporary one)"
    )
    ap.add_argument("--plot", default=str(ROOT / "docs" / "experiments" / "rollout_scaling.png"))
    ap.add_argument(
        "--set", dest="overrides", action="append", default=[], help="more demo overrides (dotted.key=value)"
    )
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gapforge-scaling-"))
    series: dict[str, list[dict]] = {}
    for seed in args.seeds:
        workspace = out / f"seed-{seed}"
        run_id, wall, _ = demo_run(seed, workspace, args.overrides)
        rows = series[f"seed {seed}"] = rows_of(workspace, run_id)
        print(
            f"\n## training seed {seed}: run {run_id} ({workspace}), demo with the curve {wall / 60:.1f} min\n",
            flush=True,
        )
        print("\n".join(scaling_table(rows)))
        for who, name in (("trace", "TRACE"), ("grpo", "GRPO-on-target")):
            rate = per_1000(rows, who)
            print(f"{name}: {'–' if rate is None else f'{rate:+.1f}'} points per 1,000 training rollouts", flush=True)
    print("\n## per 1,000 training rollouts (mean over seeds)\n")
    for who, name in (("trace", "TRACE"), ("grpo", "GRPO-on-target")):
        rates = [r for rows in series.values() if (r := per_1000(rows, who)) is not None]
        if rates:
            print(
                f"{name}: {sum(rates) / len(rates):+.1f} points per 1,000 training rollouts (seeds: {', '.join(f'{r:+.1f}' for r in rates)})"
            )
    plot = scaling_plot(series, args.plot)
    print(f"\nplot: {plot}")


if __name__ == "__main__":
    main()
