"""Run a synthetic env (an envs.sdk.SyntheticEnv subclass) in this process, behind the Environment protocol.

!!! TRUSTED CODE ONLY !!! The module runs in the calling process with no isolation: only code a person wrote and
reviewed (envs/examples/, benchmarks, tests). LLM-written env code only ever runs in the sandbox (sandbox.SandboxedEnv).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.naming import synthetic_env_name
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef, seed_of
from gapforge.envs.sdk import EnvDefinitionError, SyntheticEnv, find_env_class

SDK_NAME = "envs.sdk"  # the SDK's name in the sandbox (sandbox/mount.py), the one env modules import


_SDK_SWAP = threading.RLock()
_LOADS = itertools.count()


@contextmanager
def sdk_as_in_sandbox() -> Iterator[None]:
    """While an env module is imported here, `envs` / `envs.sdk` are gapforge.envs / gapforge.envs.sdk, as they are
    in the sandbox: one SyntheticEnv class for the module and this process. Whatever held those names before (a
    package of the user's own called `envs`, or nothing) holds them again afterwards. One import at a time in the
    process (`_SDK_SWAP`): threads loading env modules at once would otherwise save and restore each other's aliases
    (one import then finds no `envs`, or the alias outlives every import)."""
    with _SDK_SWAP:
        sdk = sys.modules[SyntheticEnv.__module__]
        package = sys.modules[sdk.__name__.rpartition(".")[0]]
        names = {"envs": package, SDK_NAME: sdk}
        # copies first (dict.copy is one step under the GIL): other threads import while this one iterates
        saved = {
            name: module for name, module in sys.modules.copy().items() if name == "envs" or name.startswith("envs.")
        }
        attributes = vars(package).copy()
        sys.modules.update(names)
        try:
            yield
        finally:
            # an env module importing another `envs.<x>` made a second copy of gapforge.envs.<x> under that name and
            # set it on the package: drop the copies, give the package its own attributes back
            for name in [n for n in sys.modules.copy() if (n == "envs" or n.startswith("envs.")) and n not in saved]:
                sys.modules.pop(name, None)
            sys.modules.update(saved)
            for key in [k for k in vars(package).copy() if k not in attributes]:
                delattr(package, key)
            for key, value in attributes.items():
                if vars(package).get(key) is not value:
                    setattr(package, key, value)


def load_env_class(path: str | Path) -> type[SyntheticEnv]:
    """Import the module file at `path` (TRUSTED CODE ONLY) and return its one SyntheticEnv subclass."""
    path = Path(path)
    if not path.is_file() or path.suffix != ".py":
        raise EnvError(f"synthetic env module {path} not found; give the path of a .py file")
    name = f"gapforge_trusted_env_{abs(hash(path.resolve()))}_{next(_LOADS)}"  # one name per load: threads may load one file
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EnvError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # typing.get_type_hints resolves annotations through sys.modules
    try:
        with sdk_as_in_sandbox():
            spec.loader.exec_module(module)
        return find_env_class(module)
    except EnvDefinitionError as exc:
        raise EnvError(f"{path}: {exc}") from None
    finally:
        sys.modules.pop(name, None)


class InProcessSyntheticEnv:
    """TRUSTED CODE ONLY: an SDK env class run in-process, speaking envs.protocol.Environment.

    `task` for reset() is an integer seed. `solution(seed)` returns the env's reference
    actions ({"tool": name, "arguments": {...}} or {"say": text}).
    """

    def __init__(self, env: type[SyntheticEnv] | str | Path) -> None:
        if isinstance(env, (str, Path)):
            env = load_env_class(env)
        elif not (isinstance(env, type) and issubclass(env, SyntheticEnv)):
            raise EnvError(f"InProcessSyntheticEnv needs a SyntheticEnv subclass or a module path, got {env!r}")
        else:
            try:
                env.check_definition()
            except EnvDefinitionError as exc:
                raise EnvError(str(exc)) from None
        self.env_class = env
        self._env = env()
        self.name = synthetic_env_name(env.capability)

    @property
    def capability(self) -> str:
        return self.env_class.capability

    def tools(self) -> list[dict[str, Any]]:
        return self._env.tools()

    def reset(self, task: TaskRef) -> list[Message]:
        return [Message.model_validate(m) for m in self._env.reset(seed_of(task))]

    def step(self, message: Message) -> StepResult:
        out = self._env.step(message.model_dump(mode="json"))
        return StepResult(
            messages=[Message.model_validate(m) for m in out["messages"]], done=out["done"], info=out["info"]
        )

    def score(self) -> Score:
        return Score.model_validate(self._env.score())

    def solution(self, seed: int) -> list[dict[str, Any]]:
        return self._env.solution(seed)

    def scenario(self, seed: int) -> dict[str, Any]:
        return self._env.scenario_for(seed)

    def close(self) -> None:
        pass
