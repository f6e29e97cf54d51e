"""Where the work runs (`executor:` local | ray): the executor pieces the composition root hands to the
stages and commands (the collector's episode player, the evaluation's players; the training job runner and joining
the cluster: gapforge.executor's `job_runner` and `connect`). The sandbox checks are in `gapforge.wiring.sandbox_checks` (build_deps puts
them in `StageDeps`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from gapforge.config import GapforgeConfig, PolicyConfig
from gapforge.wiring import make_policy

if TYPE_CHECKING:
    from gapforge.envs.protocol import TargetEnvironment
    from gapforge.store import Store


def episode_player(cfg: GapforgeConfig, pol: PolicyConfig, make_env: Callable[[], TargetEnvironment]):
    """Where the collector's episodes are played (`async with`): None = this process's event loop; local worker
    processes (a local policy on a CPU-only machine: gapforge.stages.common.rollout_workers); or Ray actors. The
    processes and actors each build the policy `pol` and envs from `make_env` themselves."""
    from gapforge.executor import episode_player as player
    from gapforge.stages.common import rollout_workers

    workers, threads = rollout_workers(cfg)
    return player(
        cfg.executor,
        functools.partial(make_policy, pol),
        make_env,
        cfg.rollouts.concurrency,
        local_workers=workers,
        threads=threads,
    )


def executor_overrides(overrides: list[str] | None) -> list[str]:
    """The `--set executor.*` items of a command: where a resumed run executes is this invocation's choice
    (another machine, another cluster), not the stored record's."""
    return [item for item in overrides or [] if item.strip().startswith("gapforge.executor.")]


@contextlib.asynccontextmanager
async def evaluation_players(
    cfg: GapforgeConfig, store: Store, run_id: str, base_dir: str, artifacts, make_env, baseline_path=None
):
    """(`async with`) `evaluation.run.evaluate(players=...)`: None (every policy plays here), or, with the local
    multi-adapter backend (policy.kind local), local worker processes (gapforge.stages.common.rollout_workers) or Ray
    actors that rebuild each evaluated policy from the base weights and the adapters (their directories locally,
    their bytes on Ray); the routed policy plays here, where its routing decisions are recorded.
    A served policy (endpoint: vLLM holds the adapters) keeps its few HTTP clients on the driver. `baseline_path`: the
    GRPO-on-target adapter to play instead of the run's stored one (a rollout-scaling point: evaluation/rollout_scaling.py)."""
    from gapforge.stages.common import rollout_workers

    workers, threads = rollout_workers(cfg)
    if cfg.policy.kind != "local" or (cfg.executor.kind == "local" and workers <= 1):
        yield None
        return
    from gapforge.evaluation.policies import GRPO_TARGET
    from gapforge.executor.evaluation import eval_players, local_eval_players, recipe

    paths = dict(artifacts.adapter_paths)
    baseline = store.get_adapter(run_id, GRPO_TARGET) if baseline_path is None else None
    if baseline is not None and baseline.status == "done" and baseline.path:
        paths[GRPO_TARGET] = baseline.path
    elif baseline_path is not None:
        paths[GRPO_TARGET] = baseline_path
    local = cfg.executor.kind == "local"
    base = recipe(
        base_dir,
        paths,
        artifacts.capabilities,
        list(artifacts.adapter_paths),
        temperature=cfg.policy.temperature,
        max_new_tokens=cfg.policy.max_new_tokens,
        seed=cfg.seed,
        worker_dir=cfg.executor.worker_dir,
        ship=not local,
    )
    if not local:
        yield eval_players(cfg.executor, base, make_env, cfg.rollouts.concurrency)
        return
    async with local_eval_players(base, make_env, workers, threads) as players:
        yield players
