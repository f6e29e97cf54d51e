"""bench/consolidation.py's evaluation: base and the consolidated adapter on the shop's held-out split with the demo's
trials, paired with the base per family, and (given a demo run) with that run's routed TRACE and adapters.

Pairing across runs is by (task, sample): every episode seeds from its key, so the base played here and the demo's
base give the same episode on the same key; `same_base` counts how many of the shared keys agree, the check that the
pairing holds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gapforge.evaluation import stats
from gapforge.evaluation.summary import points, scope_metrics


def _episodes(store: Any, child: str, env: str) -> stats.Episodes:
    out: dict[str, dict[int, tuple[float, bool]]] = {}
    for r in store.episodes(child, env=env):
        out.setdefault(r.task_id, {})[r.sample] = (float(r.reward), bool(r.success))
    return out


def demo_store(demo: str) -> tuple[Path, str]:
    """(store file, run id) of `demo` = WORKSPACE:RUN, checked before any training: the file exists (opening a path that
    does not would create an empty store) and holds the run. Anything else ends the bench with one line."""
    from gapforge.store.db import Store
    from gapforge.store.errors import StoreError

    ws, _, run = demo.rpartition(":")
    path = Path(ws) / ".gapforge" / "gapforge.db"
    if not ws or not run or not path.is_file():
        sys.exit(
            f"--demo {demo}: no store at {path}: give WORKSPACE:RUN, WORKSPACE the directory the demo ran in (it holds .gapforge/)"
        )
    try:
        with Store(f"sqlite:///{path}") as store:
            store.get_run(run)
    except StoreError as e:
        sys.exit(f"--demo {demo}: {e}")
    return path, run


def demo_episodes(demo: str) -> dict[str, stats.Episodes]:
    """{policy: episodes} of a demo run's evaluation, `demo` = WORKSPACE:RUN (its store: WORKSPACE/.gapforge/gapforge.db)."""
    from gapforge.store.db import Store

    path, run = demo_store(demo)
    with Store(f"sqlite:///{path}") as store:
        evals = scope_metrics(store, run)
        return {name: _episodes(store, m["child_run"], m["env"]) for name, m in evals.items() if "child_run" in m}


async def evaluate_consolidated(
    model: str, adapter: str, tree: dict, out: Path, *, demo: str | None = None
) -> dict[str, Any]:
    from gapforge.agents.analysis.config import AnalysisConfig
    from gapforge.agents.analysis.split import split_tasks
    from gapforge.agents.config import PolicyConfig, RolloutConfig
    from gapforge.envs.shop import ShopEnv
    from gapforge.evaluation.config import EvaluationConfig
    from gapforge.evaluation.run import EvalPlan, evaluate
    from gapforge.serving.multi_adapter import MultiAdapterModel
    from gapforge.store.db import Store

    policy, rollouts = PolicyConfig(**tree.get("policy", {})), RolloutConfig(**tree.get("rollouts", {}))
    analysis, ev = AnalysisConfig(**tree.get("analysis", {})), EvaluationConfig(**tree.get("evaluation", {}))
    seed = int(tree.get("seed", 0))
    shop = ShopEnv()
    families = {t: shop.task_family(t) for t in shop.task_ids()}
    heldout = list(split_tasks(families, analysis.split_fraction, analysis.seed, "shop").heldout)
    backend = MultiAdapterModel(model, {"consolidated": adapter}, max_new_tokens=policy.max_new_tokens, seed=seed)
    policies = {
        "base": backend.policy(None, temperature=policy.temperature, name="base"),
        "adapter:consolidated": backend.policy(
            "consolidated", temperature=policy.temperature, name="adapter:consolidated"
        ),
    }
    plan = EvalPlan(
        "consolidation",
        "shop",
        heldout,
        trials=ev.trials,
        max_turns=rollouts.max_turns,
        temperature=policy.temperature,
        concurrency=rollouts.concurrency,
        seed=seed,
        family_trials=dict(ev.family_trials),
        family_trials_policies=tuple(policies),
        focus_family=ev.focus_family,
        min_family_episodes=ev.min_family_episodes,
    )
    try:
        with Store(f"sqlite:///{out / 'consolidation.db'}") as store:
            store.create_run("trace", {}, run_id="consolidation", exist_ok=True)
            result = await evaluate(store, plan, make_env=ShopEnv, policies=policies, families=families)
            mine = {p.name: _episodes(store, p.child_run, "shop") for p in result.policies}
    finally:
        await backend.aclose()
    res: dict[str, Any] = {"metrics": {p.name: p.metrics for p in result.policies}, "vs_demo": {}, "same_base": None}
    if demo:
        theirs = demo_episodes(demo)
        shared = [(t, s) for t, rows in mine["base"].items() for s in rows if s in theirs.get("base", {}).get(t, {})]
        res["same_base"] = (sum(mine["base"][t][s] == theirs["base"][t][s] for t, s in shared), len(shared))
        for name in sorted(n for n in theirs if n == "trace_routed" or n.startswith("adapter:")):
            res["vs_demo"][name] = stats.paired_by_family(mine["adapter:consolidated"], theirs[name], families) | {
                "all": stats.paired_episodes(mine["adapter:consolidated"], theirs[name])
            }
    return res


def _d(d: dict) -> str:
    pr = d.get("pass_rate") or {}
    return "-" if pr.get("value") is None else f"{points(pr)} ({d.get('episodes', 0)} pairs)"


def print_eval(res: dict[str, Any], seconds: float) -> None:
    m = res["metrics"]["adapter:consolidated"]
    print("\nconsolidated adapter − base on the shop's held-out split (paired):")
    print(f"  all tasks {_d(m['vs_base_paired'])}")
    for f, d in sorted((m.get("vs_base_by_family") or {}).items()):
        rate = m["by_family"][f]["pass_rate"]["value"]
        print(f"  {f}: {rate:.1%}, {_d(d)}")
    if res["same_base"] is not None:
        print(
            f"base episodes identical to the demo run's on {res['same_base'][0]} of {res['same_base'][1]} shared (task, trial) keys"
        )
    for name, fams in res["vs_demo"].items():
        per = "; ".join(f"{f} {_d(d)}" for f, d in sorted(fams.items()) if f != "all")
        print(f"consolidated − demo's {name}: all {_d(fams['all'])}; {per}")
    print(f"evaluation wall time {seconds:.0f}s")
