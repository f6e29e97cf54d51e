"""The one env naming rule, the name episodes, validations, adapters and evaluations are stored under: target envs
`shop`, `tau2:<domain>` (envs.registry); synthetic envs `synthetic:<capability>`, the same in-process
(envs.synthetic) or in the sandbox (sandbox.SandboxedEnv), or `synthetic:<file stem>` without a capability.
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
