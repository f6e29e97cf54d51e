"""The demo's training and evaluation for several training seeds, one table.

For each seed: GRPO + LoRA on the demo's accepted precondition env (the recorded generator's last
answer) in the Docker sandbox with the demo's training config; the held-out synthetic reward of base
vs the kept adapter on TEST seeds nobody selected on (after the training and selection seeds), paired
rollout by rollout; then on THE shop's held-out split (the demo's analysis split): base, the adapter
alone and routed TRACE (routing.backend=openings, the demo's router until 2026-11-27; the demo now routes
with the learned gate, which this bench does not build yet), every policy on the same
(task, trial) seeds, the planted family (policy_refusal) with --family-trials trials per task, the
other families with --trials. Paired differences to the base with two-stage bootstrap 95%
intervals (tasks, then trials within each task: evaluation.stats.paired_episodes). Wall time per stage.

    .venv/bin/python bench/effect.py [--seeds 0 1 2] [--family-trials 40] [--trials 4] [--test-seeds 32]

Prints numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml

from agents.analysis.config import AnalysisConfig
from agents.analysis.split import split_tasks
from agents.config import PolicyConfig, RolloutConfig
from agents.routed_policy import RoutedPolicy
from agents.router import RouteOption, Router, RoutingConfig
from agents.router_backends import OpeningsScorer
from envs.shop import ShopEnv
from evaluation import stats
from evaluation.routing import env_openings
from evaluation.run import EvalPlan, evaluate
from gapforge.demo_data import RECORDINGS_DIR
from sandbox.config import SandboxConfig
from store.db import Store
from training.artifact import SHIPPED
from training.config import TrainingConfig
from training.deprecations import quiet_library_deprecations
from training.envs import EnvSpec, open_factory
from training.service import TrainJob, train_capability

MODULE = RECORDINGS_DIR / "shop" / "precondition_verification_3.py"
DEMO_PROFILE = ROOT / "gapforge" / "demo_profile.yaml"  # data: read, not imported
PLANTED = "policy_refusal"
CAPABILITY = "precondition_verification"


class Profile:
    """The config sections this bench uses, from the demo's profile (gapforge/demo_profile.yaml) plus --set overrides;
    each section validated by its own class (bench/ sits below gapforge/ and does not import it)."""

    def __init__(self, overrides: list[str]) -> None:
        tree: dict = {}
        for item in [*yaml.safe_load(DEMO_PROFILE.read_text())["settings"], *overrides]:
            key, raw = item.split("=", 1)
            node = tree
            *parents, leaf = key.strip().split(".")
            for k in parents:
                node = node.setdefault(k, {})
            node[leaf] = yaml.safe_load(raw)
        self.seed = int(tree.get("seed", 0))
        self.training = TrainingConfig(**tree.get("training", {}))
        self.routing = RoutingConfig(**tree.get("routing", {}))
        self.analysis = AnalysisConfig(**tree.get("analysis", {}))
        self.policy = PolicyConfig(**tree.get("policy", {}))
        self.rollouts = RolloutConfig(**tree.get("rollouts", {}))
        self.sandbox = SandboxConfig(**tree.get("sandbox", {}))


def heldout_test(model: str, adapter: str, spec: EnvSpec, cfg, seeds: list[int]) -> dict:
    """Base vs adapter on synthetic test seeds, paired by (seed, sample): the mean reward difference and its interval."""
    from training.evaluate import load_policy
    from training.selection import evaluate_heldout

    make_env, close = open_factory(spec, pool_size=2)
    try:
        rewards = {}
        for name, adapter_dir in (("base", None), ("adapter", adapter)):
            m, tok = load_policy(model, adapter_dir)
            rewards[name] = evaluate_heldout(m, tok, make_env, seeds, cfg, eval_seed=cfg.seed)["rewards"]
    finally:
        close()
    k = cfg.heldout_samples
    as_eps = lambda rs: {s: {i: (rs[j * k + i], rs[j * k + i] >= 0.999) for i in range(k)} for j, s in enumerate(seeds)}  # noqa: E731
    paired = stats.paired_episodes(as_eps(rewards["adapter"]), as_eps(rewards["base"]))
    return {"base": sum(rewards["base"]) / len(rewards["base"]), "adapter": sum(rewards["adapter"]) / len(rewards["adapter"]),
            "diff": paired["mean_reward"], "n": paired["episodes"]}


def main() -> None:
    quiet_library_deprecations()  # as the CLI does: TRL / PEFT's checkpointing deprecations at every step and load
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SHIPPED))
    ap.add_argument("--module", default=str(MODULE))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--family-trials", type=int, default=40, help="trials per planted-family held-out task (base, adapters, routed)")
    ap.add_argument("--trials", type=int, default=4, help="trials per task of the other families")
    ap.add_argument("--test-seeds", type=int, default=32, help="synthetic test seeds (x training.heldout_samples rollouts)")
    ap.add_argument("--out", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra config overrides (dotted.key=value)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gapforge-effect-"))
    cfg = Profile(args.overrides)
    spec = EnvSpec(kind="sandbox", module=str(Path(args.module).resolve()), sandbox=cfg.sandbox.model_dump(mode="json"))
    shop = ShopEnv()
    families = {t: shop.task_family(t) for t in shop.task_ids()}
    heldout = list(split_tasks(families, cfg.analysis.split_fraction, cfg.analysis.seed, "shop").heldout)
    print(f"model {args.model}; env {Path(args.module).name}; held-out shop tasks {len(heldout)} "
          f"({sum(families[t] == PLANTED for t in heldout)} {PLANTED}); work dir {out}", flush=True)

    adapters: dict[int, str] = {}
    rows: dict[int, dict] = {}
    for seed in args.seeds:
        tcfg = cfg.training.model_copy(update={"seed": seed})
        t0 = time.perf_counter()
        res = train_capability(TrainJob(name=f"s{seed}", capability=CAPABILITY, base_model=args.model, env=spec, config=tcfg,
                                        out_dir=str(out / f"adapter-s{seed}")))
        train_s = time.perf_counter() - t0
        first = tcfg.train_seeds + tcfg.heldout_seeds
        t0 = time.perf_counter()
        test = heldout_test(args.model, res.adapter_path, spec, tcfg, list(range(first, first + args.test_seeds)))
        adapters[seed] = res.adapter_path
        rows[seed] = {"train_s": train_s, "kept": res.best_step, "selection": (res.heldout_before, res.heldout_after), "test": test,
                      "test_s": time.perf_counter() - t0}
        print(f"seed {seed}: trained in {train_s:.0f}s, kept step {res.best_step}; synthetic test seeds base {test['base']:.3f} -> "
              f"adapter {test['adapter']:.3f}, paired {test['diff']['value']:+.3f} [{test['diff']['low']:+.3f}, {test['diff']['high']:+.3f}] "
              f"n={test['n']}", flush=True)

    t0 = time.perf_counter()
    rows_shop = asyncio.run(shop_eval(args, cfg, spec, adapters, heldout, families, out))
    shop_s = time.perf_counter() - t0
    print_table(args, rows, rows_shop, shop_s)


_BACKEND: dict[tuple, object] = {}  # per process (the driver, or a worker): the multi-adapter backend, loaded once


def bench_policies(model: str, adapters: tuple[tuple[int, str], ...], openings: tuple[str, ...], max_new_tokens: int, seed: int,
                   temperature: float, min_similarity: float, routing: dict) -> dict:
    """The bench's policies (base, each adapter alone, each routed by the demo's openings router) over one backend."""
    from serving.multi_adapter import MultiAdapterModel

    key = (model, adapters, max_new_tokens, seed)
    if key not in _BACKEND:
        _BACKEND[key] = MultiAdapterModel(model, {f"s{s}": p for s, p in adapters}, max_new_tokens=max_new_tokens, seed=seed)
    backend = _BACKEND[key]
    base = backend.policy(None, temperature=temperature, name="base")
    policies = {"base": base}
    for s, _ in adapters:
        one = backend.policy(f"s{s}", temperature=temperature, name=f"adapter:s{s}")
        router = Router([RouteOption("A", CAPABILITY, "", adapter=f"s{s}")], OpeningsScorer([list(openings)], min_similarity=min_similarity),
                        RoutingConfig(**routing))
        policies[f"adapter:s{s}"] = one
        policies[f"trace_routed:s{s}"] = RoutedPolicy(router, base, {f"s{s}": one}, name=f"trace_routed:s{s}")
    return policies


def bench_policy(name: str, *recipe) -> object:
    """One named policy, for a worker process (executor/processes.py: a picklable factory)."""
    return bench_policies(*recipe)[name]


async def shop_eval(args, cfg, spec: EnvSpec, adapters: dict[int, str], heldout: list[str], families: dict[str, str], out: Path) -> dict:
    """Every policy on the shop's held-out split. Episodes play on local worker processes, one per core (as the demo's
    evaluation: gapforge.stages.common.rollout_workers; the routed ones too, their openings router being portable);
    the episodes are keyed, so they are the ones this process would play (tests/executor/test_processes.py)."""
    from contextlib import asynccontextmanager

    from executor.processes import process_pool
    from training.cpu import usable_cores

    make_env, close = open_factory(spec, pool_size=2)
    try:
        openings = env_openings(make_env, list(range(cfg.training.train_seeds)))
    finally:
        close()
    temp = cfg.policy.temperature
    recipe = (args.model, tuple(sorted(adapters.items())), tuple(openings), cfg.policy.max_new_tokens, cfg.seed, temp,
              cfg.routing.openings_min_similarity, cfg.routing.model_dump(mode="json"))
    policies = bench_policies(*recipe)
    plan = EvalPlan("effect", "shop", heldout, trials=args.trials, max_turns=cfg.rollouts.max_turns, temperature=temp,
                    concurrency=cfg.rollouts.concurrency, family_trials={PLANTED: args.family_trials},
                    family_trials_policies=tuple(policies), focus_family=PLANTED)
    workers = max(1, min(usable_cores(), 4))
    async with process_pool(workers, max(1, usable_cores() // workers)) as pool:

        @asynccontextmanager
        async def players(name: str, _policy: object):
            yield pool.player(functools.partial(bench_policy, name, *recipe), ShopEnv) if workers > 1 else None

        with Store(f"sqlite:///{out / 'effect.db'}") as store:
            store.create_run("trace", {}, run_id="effect", exist_ok=True)
            result = await evaluate(store, plan, make_env=ShopEnv, policies=policies, families=families, players=players)
    for backend in _BACKEND.values():
        await backend.aclose()
    return {p.name: p.metrics for p in result.policies}


def _iv(iv: dict | None, scale: float = 100.0, digits: int = 1) -> str:
    if not iv or iv.get("value") is None:
        return "-"
    return f"{iv['value'] * scale:+.{digits}f} [{iv['low'] * scale:+.{digits}f}, {iv['high'] * scale:+.{digits}f}]"


def print_table(args, rows: dict[int, dict], shop: dict[str, dict], shop_s: float) -> None:
    base = shop["base"]
    fams = sorted(base["by_family"])
    print("\nheld-out synthetic (test seeds nobody selected on), mean reward:")
    print("seed  kept  selection before->after  test base -> adapter  paired diff [95% CI]  n  train_s")
    for s, r in rows.items():
        t = r["test"]
        print(f"{s}  {r['kept']}  {r['selection'][0]:.3f}->{r['selection'][1]:.3f}  {t['base']:.3f} -> {t['adapter']:.3f}  "
              f"{_iv(t['diff'], 1.0, 3)}  {t['n']}  {r['train_s']:.0f}")
    print(f"\nshop held-out split, pass rate (base: {PLANTED} {base['by_family'][PLANTED]['pass_rate']['value']:.1%} of "
          f"{base['by_family'][PLANTED]['episodes']} episodes); paired difference to base in points [95% CI], n paired episodes:")
    print("policy  " + "  ".join(fams))
    for name, m in shop.items():
        if name == "base":
            continue
        cells = []
        for f in fams:
            d = (m.get("vs_base_by_family") or {}).get(f) or {}
            rate = m["by_family"][f]["pass_rate"]["value"]
            cells.append(f"{rate:.1%} {_iv(d.get('pass_rate'))} n={d.get('episodes', 0)}")
        print(f"{name}  " + "  |  ".join(cells))
    print(f"\nwall time: training {sum(r['train_s'] for r in rows.values()):.0f}s, synthetic tests "
          f"{sum(r['test_s'] for r in rows.values()):.0f}s, shop evaluation {shop_s:.0f}s")


if __name__ == "__main__":
    main()
