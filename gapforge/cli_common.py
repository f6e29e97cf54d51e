"""Shared CLI plumbing: config options, the one-line error policy, the console.

Every command takes `--config FILE` and `--set dotted.key=value`. Errors that
a user can fix (subclasses of the boundary errors listed in USER_ERRORS) are
printed as one line on stderr with exit code 2 and no traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Any, Callable, TypeVar

import typer
from rich.console import Console

from gapforge.config import ConfigError, GapforgeConfig, load_config

console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[str | None, typer.Option("--config", "-c", help="YAML config file")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override: dotted.key=value (repeatable)")]

F = TypeVar("F", bound=Callable[..., Any])


class UsageError(Exception):
    """Bad command-line input; the message says what to fix."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Exception classes that mean 'the user can fix this' (imported lazily: heavy modules)."""
    errors: list[type[BaseException]] = [ConfigError, UsageError]
    for mod, name in (
        ("envs.errors", "EnvError"),
        ("store.errors", "StoreError"),
        ("sandbox.errors", "SandboxError"),
        ("agents.errors", "ModelError"),
        ("serving.errors", "ServingError"),
    ):
        module = sys.modules.get(mod)
        if module is None:
            try:
                module = __import__(mod, fromlist=[name])
            except ImportError:
                continue
        cls = getattr(module, name, None)
        if cls is not None:
            errors.append(cls)
    return tuple(errors)


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handle_errors(fn: F) -> F:
    """Turn user-fixable errors into one line + exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except user_errors() as e:  # type: ignore[misc]
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__)

    return wrapper  # type: ignore[return-value]


def get_config(config: str | None, overrides: list[str] | None) -> GapforgeConfig:
    return load_config(config, overrides or [])
