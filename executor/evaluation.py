"""Evaluation episodes on Ray (`executor.kind: ray`): each evaluated policy plays on the rollout actors.

`local_eval_players` is the same on local worker processes (executor/processes.py; adapters by directory).

`EvalPolicyRecipe` is what travels instead of the driver's policy object: the base model's directory
(present on the worker, as for training), every adapter's files as bytes (LoRA adapters are small; no
shared filesystem), the capabilities and the sampling settings. On the worker it loads the same
multi-adapter backend (`evaluation.service.load_backend`, same seed) and takes the named policy from
`evaluation.policies.standard_policies`, so an episode samples what it would have sampled on the driver
(keyed seeds). The routed TRACE policy stays on the driver: its routing decisions are recorded there
(and it mostly copies the base's episodes, evaluation.reuse).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapforge.envs.protocol import PolicyModel, TargetEnvironment
from gapforge.executor.config import ExecutorConfig
from gapforge.executor.training import pack_dir, unpack_dir

_BACKENDS: dict[str, Any] = {}  # per worker process: the backend of a recipe, loaded once for all its policies
Players = Callable[[str, PolicyModel], AbstractAsyncContextManager[Any]]


@dataclass(frozen=True)
class EvalPolicyRecipe:
    """How a worker rebuilds the evaluation policy `name` of a run (picklable: paths, bytes, settings)."""

    base_model: str
    adapters: Mapping[str, bytes]  # adapter name -> its directory as tar.gz bytes
    capabilities: list[dict[str, str]]
    capability_adapters: list[str]
    temperature: float
    max_new_tokens: int
    seed: int
    worker_dir: str
    name: str = ""
    adapter_dirs: Mapping[str, str] = field(default_factory=dict)  # adapter name -> a directory here (local workers)
    key: str = field(default="", compare=False)

    def named(self, name: str) -> EvalPolicyRecipe:
        return EvalPolicyRecipe(**{**self.__dict__, "name": name})

    def __call__(self) -> PolicyModel:
        from gapforge.evaluation.policies import standard_policies

        policies = standard_policies(
            self._backend(),
            None,  # type: ignore[arg-type]
            self.capabilities,
            temperature=self.temperature,
            capability_adapters=self.capability_adapters,
        )
        return policies[self.name]

    def _backend(self) -> Any:
        if self.key not in _BACKENDS:
            from gapforge.evaluation.service import RunArtifacts, load_backend

            root = Path(self.worker_dir) / "eval-adapters" / self.key
            paths = {name: Path(path) for name, path in self.adapter_dirs.items()}
            for name, data in self.adapters.items():
                if not (root / name / "adapter_config.json").is_file():
                    unpack_dir(data, root / name)
                paths[name] = root / name
            artifacts = RunArtifacts(
                "", self.capabilities, {n: p for n, p in paths.items() if n in self.capability_adapters}
            )
            extra = {n: p for n, p in paths.items() if n not in self.capability_adapters}
            _BACKENDS[self.key] = load_backend(
                self.base_model, artifacts, extra_adapters=extra, max_new_tokens=self.max_new_tokens, seed=self.seed
            )
        return _BACKENDS[self.key]


def recipe(
    base_model: str | Path,
    adapter_paths: Mapping[str, str | Path],
    capabilities: list[dict[str, str]],
    capability_adapters: list[str],
    *,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    worker_dir: str,
    ship: bool = True,
) -> EvalPolicyRecipe:
    """`ship`: the adapters travel as bytes (Ray: no shared filesystem); else as this machine's directories (local
    workers). The routed policy is not in it: it plays on the driver."""
    packed = {name: pack_dir(Path(path)) for name, path in adapter_paths.items()}
    digest = hashlib.sha256(f"{base_model}\0{max_new_tokens}\0{seed}".encode())
    for name in sorted(packed):
        digest.update(name.encode() + packed[name])
    adapters = packed if ship else {}
    dirs = {} if ship else {name: str(path) for name, path in adapter_paths.items()}
    return EvalPolicyRecipe(
        str(base_model),
        adapters,
        list(capabilities),
        list(capability_adapters),
        temperature,
        max_new_tokens,
        seed,
        worker_dir,
        key=digest.hexdigest()[:16],
        adapter_dirs=dirs,
    )


def _routed(policy: PolicyModel) -> bool:
    """The routed policy: its decisions are read on the driver, so it plays there."""
    return getattr(policy, "decisions", None) is not None


def eval_players(
    cfg: ExecutorConfig, base: EvalPolicyRecipe, make_env: Callable[[], TargetEnvironment], concurrency: int
) -> Players:
    """`evaluation.run.evaluate(players=...)`: Ray actors for every policy but the routed one."""
    from gapforge.executor.rollouts import ray_player

    def players(name: str, policy: PolicyModel) -> AbstractAsyncContextManager[Any]:
        return nullcontext() if _routed(policy) else ray_player(cfg, base.named(name), make_env, concurrency)

    return players


@asynccontextmanager
async def local_eval_players(
    base: EvalPolicyRecipe, make_env: Callable[[], TargetEnvironment], workers: int, threads: int | None
) -> AsyncIterator[Players | None]:
    """The local twin of `eval_players`: one pool of worker processes (executor/processes.py) for the whole evaluation;
    each worker loads the multi-adapter backend once and builds every policy it is asked to play from it. None (every
    policy plays on the caller's loop) when the recipe or `make_env` cannot be pickled, as episode_player does."""
    from gapforge.executor.processes import picklable, process_pool

    if not picklable(base, make_env):  # e.g. an env factory holding a live LLM-user client: every policy plays here
        yield None
        return
    async with process_pool(workers, threads) as pool:

        @asynccontextmanager
        async def players(name: str, policy: PolicyModel) -> AsyncIterator[Any]:
            yield None if _routed(policy) else pool.player(base.named(name), make_env)

        yield players
