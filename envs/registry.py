"""Target environments from one spec string, the one loader every caller uses.

Parsed in this order, so nothing is ambiguous: the built-ins (`shop[?instances=0,51-120]`, `tau2:<domain>[?max_steps=N]`,
`toolsandbox[:category][?network=stand-in]`, `mcp:PATH.yaml`, `composite:SPEC+SPEC[+...]`), then a user's class as
`path/to/file.py:ClassName`, then `package.module:ClassName` (both with optional `?key=value&...` constructor
keywords; envs/loader.py). Every call builds a fresh instance; adapters are imported lazily (a missing extra matters
only when that env is asked for); a user's class is checked against the protocol the first time this process builds
it (envs/target_check.py).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import TargetEnvironment

TAU2_DOMAINS = ("retail", "airline", "telecom")
TAU2_OPTIONS = ("max_steps", "max_errors")  # Tau2Env's caps (τ²'s defaults: 200 steps, 10 tool errors)
USERS = ("scripted", "llm")
MCP_HINT = "pip install 'gapforge[mcp]'"
_checked: set[tuple[str, type]] = set()  # (spec, class) pairs that passed check_target here (re-imported: a new class)
_check_lock = threading.Lock()


def is_shop(name: str) -> bool:
    """The built-in shop, of one instance or many (`shop`, `shop?instances=...`)."""
    return name.partition("?")[0] == "shop"


def is_builtin(name: str) -> bool:
    """A built-in target or the mcp: prefix (not a user's class spec)."""
    base = name.partition("?")[0]
    return (
        is_shop(name)
        or name.startswith(("tau2:", "mcp:", "composite:", "trl:"))
        or base == "toolsandbox"
        or base.startswith("toolsandbox:")
    )


def list_envs() -> list[str]:
    """Built-in names `make_env` accepts (`toolsandbox` also takes `toolsandbox:<category>` and `?network=stand-in`, `tau2:<domain>`
    `?max_steps=N&max_errors=N`; besides these: `mcp:FILE.yaml`, `composite:A+B`, `trl:FILE.py:Class?rows=FILE.jsonl`,
    `package.module:Class`, `path/to/file.py:Class`)."""
    return ["shop", *(f"tau2:{d}" for d in TAU2_DOMAINS), "toolsandbox"]


def _shop_instances(name: str) -> tuple[int, ...] | None:
    """`shop` -> None (THE shop alone); `shop?instances=0,51-120` -> those instances (envs/shop/env.py)."""
    from gapforge.envs.shop.env import parse_instances

    query = name.partition("?")[2]
    if not query:
        return None
    key, _, value = query.partition("=")
    if key != "instances" or not value or "&" in value:
        raise EnvError(f"bad env '{name}': the shop takes one option, e.g. shop?instances=0,51-120")
    return parse_instances(value)


def make_env(name: str, *, user: str = "scripted", user_model: Any = None) -> TargetEnvironment:
    """A fresh target environment. user: "scripted" (offline) or "llm" (needs `user_model`)."""
    if user not in USERS:
        raise EnvError(f"unknown user '{user}': use one of {', '.join(USERS)}")
    if is_shop(name):
        from gapforge.envs.shop import ShopEnv

        return ShopEnv(user=user, user_model=user_model, instances=_shop_instances(name))
    if name.startswith("composite:"):
        from gapforge.envs.composite import CompositeEnv

        return CompositeEnv(name, user=user, user_model=user_model, make=make_env)
    if name.startswith("tau2:"):
        domain, _, query = name.split(":", 1)[1].partition("?")
        if domain not in TAU2_DOMAINS:
            raise EnvError(
                f"unknown τ²-bench domain '{domain}' in env '{name}': known envs are {', '.join(list_envs())}"
            )
        return _make_tau2(name, domain, user, user_model, _tau2_options(name, query))
    base, _, query = name.partition("?")
    if base == "toolsandbox" or base.startswith("toolsandbox:"):
        from gapforge.envs.toolsandbox import ToolSandboxEnv  # its own venv and worker process: nothing heavy here

        category = base.split(":", 1)[1] if ":" in base else None
        return ToolSandboxEnv(category, user=user, user_model=user_model, network=_toolsandbox_network(name, query))
    if name.startswith("mcp:"):
        return _checked_once(name, _make_mcp(name, user, user_model))
    if name.startswith("trl:"):  # TRL's environment_factory class and its dataset rows (envs/trl.py)
        from gapforge.envs.trl import make_trl_env

        if user != "scripted":
            raise EnvError(f"env '{name}': a TRL env has no user turns: set rollouts.user=scripted")
        return _checked_once(name, make_trl_env(name))
    if ":" not in name.partition("?")[0]:
        raise EnvError(
            f"unknown env '{name}': known envs are {', '.join(list_envs())}, mcp:FILE.yaml, "
            "or your own class as package.module:ClassName or path/to/file.py:ClassName"
        )
    from gapforge.envs.loader import construct, load_class, parse_class_spec

    spec = parse_class_spec(name)  # no colon, a bad class name or bad keywords: one line naming the forms
    return _checked_once(name, construct(load_class(spec), spec, user=user, user_model=user_model))


def _checked_once(name: str, env: Any) -> TargetEnvironment:
    """`env` after the protocol check, which runs on the first instance of `name` (and of its class) in this process."""
    if (name, type(env)) not in _checked:
        from gapforge.envs.target_check import check_target

        try:
            check_target(env, name)
        except BaseException:
            with contextlib.suppress(Exception):  # the check's error is the one to report
                env.close()
            raise
        with _check_lock:
            _checked.add((name, type(env)))
    return env  # type: ignore[no-any-return]


def _make_mcp(name: str, user: str, user_model: Any) -> Any:
    path = name.split(":", 1)[1]
    if not path:
        raise EnvError(f"env '{name}': give the target file after 'mcp:', e.g. mcp:examples/helpdesk/target.yaml")
    try:
        from gapforge.envs.mcp import McpTargetEnv
    except ImportError as err:
        raise EnvError(f"env '{name}' needs the mcp extra: {MCP_HINT} ({err})") from err
    return McpTargetEnv(path, user=user, user_model=user_model)


def _toolsandbox_network(name: str, query: str) -> str:
    """`toolsandbox[:category]?network=stand-in` -> "stand-in"; no query -> "off"."""
    if not query:
        return "off"
    key, _, value = query.partition("=")
    if key != "network" or value not in ("off", "stand-in"):
        raise EnvError(
            f"bad option {query!r} in env '{name}': the only option is network=off|stand-in (e.g. toolsandbox:single_tool_call?network=stand-in)"
        )
    return value


def _tau2_options(name: str, query: str) -> dict[str, int]:
    """`tau2:retail?max_steps=50&max_errors=10` -> {"max_steps": 50, "max_errors": 10} (τ²'s own step and error caps)."""
    from gapforge.envs.loader import parse_keywords

    options = parse_keywords(query, name)
    for key, value in options.items():
        if key not in TAU2_OPTIONS or isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EnvError(
                f"bad option {key}={value!r} in env '{name}': τ² takes {' and '.join(f'{k}=N' for k in TAU2_OPTIONS)} "
                "(whole numbers >= 1), e.g. tau2:retail?max_steps=50"
            )
    return options


def _make_tau2(
    name: str, domain: str, user: str, user_model: Any, options: dict[str, int] | None = None
) -> TargetEnvironment:
    hint = f"env '{name}' needs the tau2 extra: pip install 'gapforge[tau2]'"
    try:
        import tau2  # noqa: F401  (the extra's package; Tau2Env imports it anyway)

        from gapforge.envs.tau2 import Tau2Env
    except ImportError as err:
        if err.name == "tau2" or err.name is None and "tau2" in str(err):
            raise EnvError(f"{hint} ({err})") from err
        raise EnvError(f"env '{name}': the tau2 package is installed but cannot be imported: {err}") from err
    env: TargetEnvironment = Tau2Env(domain, user=user, user_model=user_model, **(options or {}))
    env.name = name  # episodes and logs name it by its spec, options included
    return env
