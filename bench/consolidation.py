"""The consolidation control: ONE adapter trained on the demo's synthetic envs mixed, with the same total budget as
the per-capability adapters together, then played on the shop's held-out split for every task (no router).

Mixing (`MixedEnv`): with n envs, training task t goes to env t % n as its seed t // n. The budget is scaled by n
(`consolidated_config`): n x training.max_steps at the same groups_per_step x num_generations per step, n x
train_seeds and n x heldout_seeds, so each env gets exactly the seeds its own adapter trained and was selected on
(train 0..T-1, held-out T..T+H-1) and the one adapter gets as many rollouts as the n adapters together. The tools
are the union of the envs' tools (by name; the synthetic envs mirror the target's, so a shared name has one schema):
the trainer reads an env's tools before its reset, and one adapter sees one tool list, as it will on the target. A
call to a tool the drawn env lacks is that env's own "unknown tool" error, data like any wrong call.

Evaluation: base and the consolidated adapter on the held-out split with the demo's trials (evaluation.trials, and
evaluation.family_trials and min_family_episodes for both policies), paired with the base per family; with --demo WORKSPACE:RUN also paired
with that demo run's routed TRACE and each of its adapters on the (task, trial) pairs both played (every episode seeds
from its (task, sample), so episodes of the same base on the same key are the same draw across runs).

    .venv/bin/python -m bench.consolidation [--modules A.py B.py] [--demo WORKSPACE:RUN] [--out DIR] [--set k=v ...]

Prints numbers; it does not pass or fail. tests/bench/test_consolidation.py trains it on tiny settings.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gapforge.demo_data import RECORDINGS_DIR
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef
from gapforge.training.config import TrainingConfig
from gapforge.training.envs import EnvSpec, open_factory

RECORDED = RECORDINGS_DIR / "shop"
MODULES = [
    RECORDED / "precondition_verification_3.py",
    RECORDED / "in_scope_resolution_1.py",
]  # the demo's accepted envs


class MixedEnv:
    """n environments as one (module doc): task t -> env t % n, as its task t // n; tools: the union by name."""

    name = "mixed"

    def __init__(self, makers: Sequence[Callable[[], Any]], tools: Sequence[dict[str, Any]]) -> None:
        self.makers, self._tools = list(makers), list(tools)
        self.env: Any = None

    def tools(self) -> list[dict[str, Any]]:
        return list(self._tools)

    def reset(self, task: TaskRef) -> list[Message]:
        self.close()
        k, seed = int(task) % len(self.makers), int(task) // len(self.makers)
        self.env = self.makers[k]()
        return self.env.reset(seed)

    @property
    def done(self) -> bool:
        return bool(getattr(self.env, "done", False))

    def step(self, message: Message) -> StepResult:
        return self.env.step(message)

    def score(self) -> Score:
        return self.env.score()

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()


def union_tools(tool_lists: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for tools in tool_lists:
        for t in tools:
            seen.setdefault(t.get("function", t).get("name"), t)
    return list(seen.values())


_OPEN: dict[
    str, tuple[list[Callable[[], Any]], list[dict[str, Any]]]
] = {}  # per process: the envs' factories, opened once


def mixed_env(specs: str) -> MixedEnv:
    """A MixedEnv over `specs`: a JSON list of EnvSpec fields (kind sandbox / python / ...), e.g. the trainer's
    EnvSpec(kind="python", factory="bench/consolidation.py:mixed_env?specs=[...]"). Each spec's factory opens once per
    process (sandbox pools stay warm across episodes) and closes at exit."""
    if specs not in _OPEN:
        makers, tool_lists = [], []
        for fields in json.loads(specs):
            make, close = open_factory(EnvSpec(**fields), pool_size=4)
            atexit.register(close)
            probe = make()
            try:
                tool_lists.append(probe.tools())
            finally:
                probe.close()
            makers.append(make)
        _OPEN[specs] = (makers, union_tools(tool_lists))
    makers, tools = _OPEN[specs]
    return MixedEnv(makers, tools)


def mixed_spec(specs: Sequence[EnvSpec]) -> EnvSpec:
    """The trainer's EnvSpec for the mix of `specs` (module doc)."""
    payload = json.dumps([s.model_dump(mode="json", exclude_none=True) for s in specs], separators=(",", ":"))
    from urllib.parse import quote

    return EnvSpec(kind="python", factory=f"{Path(__file__).resolve()}:mixed_env?specs={quote(payload)}")


def consolidated_config(cfg: TrainingConfig, n: int) -> TrainingConfig:
    """The one adapter's budget: n adapters' steps, training seeds and selection seeds (module doc)."""
    return cfg.model_copy(
        update={
            "max_steps": cfg.max_steps * n,
            "train_seeds": cfg.train_seeds * n,
            "heldout_seeds": cfg.heldout_seeds * n,
        }
    )


def main() -> None:
    from bench.effect import profile  # the demo profile as a tree (bench/effect.py)
    from gapforge.training.deprecations import quiet_library_deprecations
    from gapforge.training.service import TrainJob, train_capability

    quiet_library_deprecations()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--modules", nargs="+", default=[str(m) for m in MODULES], help="the synthetic env modules to mix (sandboxed)"
    )
    ap.add_argument("--model", default=None, help="base model directory (default: the shipped demo policy)")
    ap.add_argument(
        "--demo", default=None, help="WORKSPACE:RUN of a demo run to pair with (its routed TRACE and adapters)"
    )
    ap.add_argument("--out", default=None, help="work directory (default: a temporary one)")
    ap.add_argument(
        "--set", dest="overrides", action="append", default=[], help="extra demo overrides (dotted.key=value)"
    )
    args = ap.parse_args()
    if args.demo:
        from bench.consolidation_eval import demo_store

        demo_store(args.demo)  # a wrong --demo ends here, not after the training
    tree = profile(args.overrides)
    out = Path(args.out or tempfile.mkdtemp(prefix="gapforge-consolidation-"))
    model = args.model or str(_shipped())
    sandbox = tree.get("sandbox", {})
    specs = [EnvSpec(kind="sandbox", module=str(Path(m).resolve()), sandbox=sandbox) for m in args.modules]
    cfg = consolidated_config(TrainingConfig(**tree.get("training", {})), len(specs))
    print(
        f"consolidation: one adapter on {len(specs)} envs mixed, {cfg.max_steps} steps x {cfg.rollouts_per_step} rollouts "
        f"({cfg.max_steps * cfg.rollouts_per_step} in all); work dir {out}",
        flush=True,
    )
    t0 = time.perf_counter()
    res = train_capability(
        TrainJob(
            name="consolidated",
            capability="consolidated",
            base_model=model,
            env=mixed_spec(specs),
            config=cfg,
            out_dir=str(out / "consolidated"),
        )
    )
    print(
        f"trained in {time.perf_counter() - t0:.0f}s: kept step {res.best_step}, held-out synthetic (both envs) "
        f"{res.heldout_before:.3f} -> {res.heldout_after:.3f}",
        flush=True,
    )
    from bench.consolidation_eval import evaluate_consolidated, print_eval

    t0 = time.perf_counter()
    result = asyncio.run(evaluate_consolidated(model, res.adapter_path, tree, out, demo=args.demo))
    print_eval(result, time.perf_counter() - t0)


def _shipped() -> Path:
    from gapforge.demo_policy.artifact import SHIPPED

    return SHIPPED


if __name__ == "__main__":
    main()
