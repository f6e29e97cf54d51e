"""The one env naming rule: the name an episode, a validation, an adapter or an
evaluation is stored under.

- target envs: `shop`, `tau2:<domain>` (envs.registry);
- synthetic envs: `synthetic:<capability>`, the same whether the module runs
  in-process (envs.synthetic, trusted code) or in the sandbox (sandbox.SandboxedEnv),
  so validation, training and evaluation share store keys. A module that declares
  no capability is named by its file stem instead.
"""

from __future__ import annotations

import re
from pathlib import Path

SYNTHETIC_PREFIX = "synthetic:"
_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def synthetic_env_name(capability: str | None, module_path: str | Path | None = None) -> str:
    """`synthetic:<capability>` (or `synthetic:<module stem>` when no capability is declared)."""
    if isinstance(capability, str) and _SNAKE.match(capability):
        return SYNTHETIC_PREFIX + capability
    if module_path is not None:
        return SYNTHETIC_PREFIX + Path(module_path).stem
    raise ValueError(f"a synthetic env needs a snake_case capability or a module path, got {capability!r}")


def capability_of(env_name: str) -> str | None:
    """The capability of a synthetic env name, None for target envs."""
    return env_name[len(SYNTHETIC_PREFIX) :] if env_name.startswith(SYNTHETIC_PREFIX) else None
