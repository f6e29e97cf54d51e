"""Evaluation episodes on Ray (`executor.kind: ray`): each evaluated policy plays on the rollout actors.

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
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.protocol import PolicyModel, TargetEnvironment
from executor.config import ExecutorConfig
from executor.training import pack_dir, unpack_dir

_BACKENDS: dict[str, Any] = {}  # per worker process: the backend of a recipe, loaded once for all its policies


@dataclass(frozen=True)
class EvalPolicyRecipe:
    """How a worker rebuilds the evaluation policy `name` of a run (picklable: paths, bytes, settings)."""

    base_model: str
    adapters: Mapping[str, bytes]  # adapter name -> its directory as tar.gz bytes
    capabilities: list[dict[str, str]]
    capability_adapters: list[str]
    grpo_target: str | None
    temperature: float
    max_new_tokens: int
    seed: int
    worker_dir: str
    name: str = ""
    key: str = field(default="", compare=False)

    def named(self, name: str) -> EvalPolicyRecipe:
        return EvalPolicyRecipe(**{**self.__dict__, "name": name})

    def __call__(self) -> PolicyModel:
        from evaluation.policies import standard_policies

        backend = self._backend()
        policies = standard_policies(backend, None, self.capabilities, temperature=self.temperature,  # type: ignore[arg-type]
                                     capability_adapters=self.capability_adapters, grpo_target_adapter=self.grpo_target)
        return policies[self.name]

    def _backend(self) -> Any:
        if self.key not in _BACKENDS:
            from evaluation.service import RunArtifacts, load_backend

            root = Path(self.worker_dir) / "eval-adapters" / self.key
            paths = {}
            for name, data in self.adapters.items():
                if not (root / name / "adapter_config.json").is_file():
                    unpack_dir(data, root / name)
                paths[name] = root / name
            artifacts = RunArtifacts("", self.capabilities, {n: p for n, p in paths.items() if n in self.capability_adapters})
            extra = {n: p for n, p in paths.items() if n not in self.capability_adapters}
            _BACKENDS[self.key] = load_backend(self.base_model, artifacts, extra_adapters=extra, max_new_tokens=self.max_new_tokens,
                                               seed=self.seed)
        return _BACKENDS[self.key]


def recipe(base_model: str | Path, adapter_paths: Mapping[str, str | Path], capabilities: list[dict[str, str]],
           capability_adapters: list[str], grpo_target: str | None, *, temperature: float, max_new_tokens: int, seed: int,
           worker_dir: str) -> EvalPolicyRecipe:
    adapters = {name: pack_dir(Path(path)) for name, path in adapter_paths.items()}
    digest = hashlib.sha256(f"{base_model}\0{max_new_tokens}\0{seed}".encode())
    for name in sorted(adapters):
        digest.update(name.encode() + adapters[name])
    return EvalPolicyRecipe(str(base_model), adapters, list(capabilities), list(capability_adapters), grpo_target, temperature,
                            max_new_tokens, seed, worker_dir, key=digest.hexdigest()[:16])


def eval_players(cfg: ExecutorConfig, base: EvalPolicyRecipe, make_env: Callable[[], TargetEnvironment],
                 concurrency: int) -> Callable[[str, PolicyModel], AbstractAsyncContextManager[Any]]:
    """`evaluation.run.evaluate(players=...)`: Ray actors for every policy but one that records routing decisions."""
    from executor.rollouts import ray_player

    def players(name: str, policy: PolicyModel) -> AbstractAsyncContextManager[Any]:
        if getattr(policy, "decisions", None) is not None:  # the routed policy: its decisions are read on the driver
            return nullcontext()
        return ray_player(cfg, base.named(name), make_env, concurrency)

    return players
