"""Target environments by name: `make_env("shop")`, `make_env("tau2:retail")`, `make_env("tau2:telecom")`,
`make_env("toolsandbox:state_dependency")`, `make_env("toolsandbox?network=stand-in")`.

Every call builds a fresh instance (episodes never share state). Adapters to
external benchmarks are imported lazily, so a missing extra only matters when
that env is asked for.
"""

from __future__ import annotations

from typing import Any

from envs.errors import EnvError
from envs.protocol import TargetEnvironment

TAU2_DOMAINS = ("retail", "airline", "telecom")
USERS = ("scripted", "llm")


def list_envs() -> list[str]:
    """Names `make_env` accepts (`toolsandbox` also takes `toolsandbox:<category>` and `?network=stand-in`)."""
    return ["shop", *(f"tau2:{d}" for d in TAU2_DOMAINS), "toolsandbox"]


def make_env(name: str, *, user: str = "scripted", user_model: Any = None) -> TargetEnvironment:
    """A fresh target environment. user: "scripted" (offline) or "llm" (needs `user_model`)."""
    if user not in USERS:
        raise EnvError(f"unknown user '{user}': use one of {', '.join(USERS)}")
    if name == "shop":
        from envs.shop import ShopEnv

        return ShopEnv(user=user, user_model=user_model)
    if name.startswith("tau2:"):
        domain = name.split(":", 1)[1]
        if domain not in TAU2_DOMAINS:
            raise EnvError(f"unknown τ²-bench domain '{domain}' in env '{name}': known envs are {', '.join(list_envs())}")
        return _make_tau2(name, domain, user, user_model)
    base, _, query = name.partition("?")
    if base == "toolsandbox" or base.startswith("toolsandbox:"):
        from envs.toolsandbox import (
            ToolSandboxEnv,  # its own venv and worker process; nothing heavy here
        )

        category = base.split(":", 1)[1] if ":" in base else None
        return ToolSandboxEnv(category, user=user, user_model=user_model, network=_toolsandbox_network(name, query))
    raise EnvError(f"unknown env '{name}': known envs are {', '.join(list_envs())}")


def _toolsandbox_network(name: str, query: str) -> str:
    """`toolsandbox[:category]?network=stand-in` -> "stand-in"; no query -> "off"; the old `network=recorded` is refused
    with the new name (its answers were never recorded)."""
    if not query:
        return "off"
    key, _, value = query.partition("=")
    if key == "network" and value == "recorded":
        from envs.toolsandbox.env import RENAMED

        raise EnvError(f"env '{name}': {RENAMED}")
    if key != "network" or value not in ("off", "stand-in"):
        raise EnvError(f"bad option {query!r} in env '{name}': the only option is network=off|stand-in (e.g. toolsandbox:single_tool_call?network=stand-in)")
    return value


def _make_tau2(name: str, domain: str, user: str, user_model: Any) -> TargetEnvironment:
    hint = f"env '{name}' needs the tau2 extra: pip install 'gapforge[tau2]'"
    try:
        import tau2  # noqa: F401  (the extra's package; Tau2Env imports it anyway)

        from envs.tau2 import Tau2Env
    except ImportError as err:
        if err.name == "tau2" or err.name is None and "tau2" in str(err):
            raise EnvError(f"{hint} ({err})") from err
        raise EnvError(f"env '{name}': the tau2 package is installed but cannot be imported: {err}") from err
    env: TargetEnvironment = Tau2Env(domain, user=user, user_model=user_model)
    return env
