"""Which environment a training job plays, as data (`EnvSpec`), and the factory for it.

- `sandbox`: a synthetic env module in the sandbox (`sandbox.open_env`, the same code path as the validator); the job
  owns one `SandboxPool` and closes it, so no container outlives the job. All coupling to the sandbox's constructors
  is in `_sandbox_factory` (one small function, easy to follow when it changes).
- `trusted`: a hand-written synthetic env in-process (examples, tests only).
- `python`: any Environment built by a trusted callable `package.module:callable` or `path/to/file.py:callable`
  (optionally `?key=value` keywords), imported by the target loader (envs/loader.py), as `--env` specs are.
- `target`: a target env by registry name (`shop`, `tau2:retail`, ...): the "GRPO on the target" baseline trains
  through the very same trainer, against the user simulator the evaluation plays it with (`user`, and for `llm` the
  endpoint's settings: the job process reads the key from the variable they name, as the config loader does; the spec
  file never holds a key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gapforge.training.rollout import EnvFactory


class EnvSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["sandbox", "trusted", "target", "python"]
    module: str | None = Field(None, description="env module path (sandbox, trusted)")
    target: str | None = Field(None, description="registry name (target), e.g. shop")
    factory: str | None = Field(
        None,
        description="python: 'package.module:callable' or 'path/to/file.py:callable' returning an "
        "Environment (trusted code; ?key=value keywords are passed to it)",
    )
    sandbox: dict[str, Any] = Field(default_factory=dict, description="sandbox settings (SandboxConfig fields)")
    train_tasks: list[str] | None = Field(None, description="target task ids to train on")
    heldout_tasks: list[str] | None = Field(None, description="target task ids for selection (disjoint from train)")
    user: Literal["scripted", "llm"] = Field(
        "scripted", description="target: the user simulator (the evaluation's rollouts.user)"
    )
    user_endpoint: dict[str, Any] | None = Field(
        None, description="target with user llm: the llm endpoint's settings (EndpointConfig fields)"
    )

    def check(self) -> None:
        if self.kind in ("sandbox", "trusted") and not (self.module and Path(self.module).is_file()):
            raise ValueError(f"env module {self.module!r} not found: give the path of the synthetic env's .py file")
        if self.kind == "python" and (not self.factory or ":" not in self.factory):
            raise ValueError("a python env spec needs factory='package.module:callable' or 'path/to/file.py:callable'")
        if self.kind == "target":
            if not self.target or not self.train_tasks or not self.heldout_tasks:
                raise ValueError("a target env spec needs target, train_tasks and heldout_tasks")
            if set(self.train_tasks) & set(self.heldout_tasks):
                raise ValueError("train_tasks and heldout_tasks overlap: held-out tasks must be disjoint")
            if self.user == "llm" and not self.user_endpoint:
                raise ValueError("a target env spec with user llm needs user_endpoint (the llm endpoint's settings)")

    def module_sha256(self) -> str | None:
        return hashlib.sha256(Path(self.module).read_bytes()).hexdigest() if self.module else None


def _sandbox_factory(module: str, settings: dict[str, Any], pool_size: int) -> tuple[EnvFactory, Callable[[], None]]:
    import gapforge.sandbox.env as sandbox_env
    from gapforge.sandbox.pool import SandboxPool

    cfg = sandbox_env.SandboxConfig(**settings)  # wherever SandboxConfig lives, sandbox.env imports it
    pool = SandboxPool(cfg, size=pool_size, sweep_on_start=False)
    if cfg.backend == "docker":
        # remove containers of dead (SIGKILLed) jobs; best effort: another process may remove one mid-listing
        from gapforge.sandbox.docker_backend import sweep

        for _ in range(3):
            try:
                sweep(pool.client)
                break
            except Exception:  # noqa: BLE001, S112 - a vanished container; list again
                continue
    return (lambda: sandbox_env.open_env(module, cfg, pool)), pool.close


def open_factory(spec: EnvSpec, *, pool_size: int = 4) -> tuple[EnvFactory, Callable[[], None]]:
    """(make_env, close): call close() when the job ends (it releases every sandbox)."""
    spec.check()
    if spec.kind == "sandbox":
        return _sandbox_factory(str(spec.module), spec.sandbox, pool_size)
    if spec.kind == "trusted":
        from gapforge.envs.synthetic import InProcessSyntheticEnv, load_env_class

        cls = load_env_class(str(spec.module))
        return (lambda: InProcessSyntheticEnv(cls)), (lambda: None)
    if spec.kind == "python":
        import functools

        from gapforge.envs.loader import load_attr, parse_class_spec

        parsed = parse_class_spec(str(spec.factory))  # the target loader's own parsing and one-line errors
        return functools.partial(load_attr(parsed), **parsed.kwargs), (lambda: None)
    from gapforge.envs.registry import make_env

    name, user_model = str(spec.target), _user_model(spec)
    return (lambda: make_env(name, user=spec.user, user_model=user_model)), (lambda: None)


def _user_model(spec: EnvSpec) -> Any:
    """The simulated user's model for a target spec, built as gapforge.wiring.make_target_env_factory builds it for
    the evaluation: the shop takes a chat model, τ² and ToolSandbox drive their own simulators from the endpoint
    settings."""
    if spec.user != "llm":
        return None
    import os

    from gapforge.agents.config import EndpointConfig

    endpoint = EndpointConfig.model_validate(spec.user_endpoint)
    endpoint.load_key(os.environ)  # this job process is its own loader: the key never travels in the spec
    from gapforge.envs.registry import is_shop

    if not is_shop(spec.target or ""):
        return endpoint
    from gapforge.agents.llm import make_chat_model

    return make_chat_model(endpoint)


def task_split(spec: EnvSpec, train_seeds: list[int], heldout_seeds: list[int]) -> tuple[list[Any], list[Any]]:
    """(train tasks, held-out tasks): synthetic seeds from the config, or the spec's target task ids."""
    if spec.kind == "target":
        return list(spec.train_tasks or []), list(spec.heldout_tasks or [])
    return list(train_seeds), list(heldout_seeds)
