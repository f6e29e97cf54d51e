"""Where the work runs (`executor:` local | ray): the executor pieces the composition root hands to the
stage services and commands (the collector's episode player, the training job runner, the evaluation's
players, joining the cluster). The sandbox checks are in `gapforge.wiring.sandbox_checks` (build_deps puts
them in `StageDeps`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from gapforge.config import GapforgeConfig, PolicyConfig
from gapforge.wiring import make_policy

if TYPE_CHECKING:
    from envs.protocol import TargetEnvironment


def episode_player(cfg: GapforgeConfig, pol: PolicyConfig, make_env: Callable[[], TargetEnvironment]):
    """Where the collector's episodes are played (`async with`): None = this process (executor.kind local),
    else Ray actors that each build the policy `pol` and envs from `make_env` themselves."""
    from executor import episode_player as player

    return player(cfg.executor, functools.partial(make_policy, pol), make_env, cfg.rollouts.concurrency)


def connect_executor(cfg: GapforgeConfig) -> None:
    """executor.kind ray: join the cluster now, so an unreachable head stops a command before any work
    (ExecutorUnavailable: one line naming executor.address, exit 2). A no-op for kind local."""
    from executor import connect

    connect(cfg.executor)


def executor_overrides(overrides: list[str] | None) -> list[str]:
    """The `--set executor.*` items of a command: where a resumed run executes is this invocation's choice
    (another machine, another cluster), not the stored record's."""
    return [item for item in overrides or [] if item.strip().startswith("executor.")]


def job_runner(cfg: GapforgeConfig):
    """`training.run.run_jobs` (local processes) or its Ray twin (one task per job, the adapter comes back)."""
    from executor import job_runner as runner

    return runner(cfg.executor)


def evaluation_players(cfg: GapforgeConfig, store, run_id: str, base_dir: str, artifacts, make_env):
    """`evaluation.run.evaluate(players=...)`: None (every policy plays here), or, on Ray with the local multi-adapter
    backend (policy.kind local), Ray actors that rebuild each evaluated policy from the base weights and the adapters'
    bytes. A served policy (endpoint: vLLM holds the adapters) keeps its few HTTP clients on the driver."""
    if cfg.executor.kind == "local" or cfg.policy.kind != "local":
        return None
    from evaluation.policies import GRPO_TARGET
    from executor.evaluation import eval_players, recipe

    paths = dict(artifacts.adapter_paths)
    baseline = store.get_adapter(run_id, GRPO_TARGET)
    if baseline is not None and baseline.status == "done" and baseline.path:
        paths[GRPO_TARGET] = baseline.path
    base = recipe(base_dir, paths, artifacts.capabilities, list(artifacts.adapter_paths), GRPO_TARGET if GRPO_TARGET in paths else None,
                  temperature=cfg.policy.temperature, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed,
                  worker_dir=cfg.executor.worker_dir)
    return eval_players(cfg.executor, base, make_env, cfg.rollouts.concurrency)
