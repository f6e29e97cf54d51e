"""Shared CLI plumbing: config options, the one-line error policy, the console.

Every command takes `--config FILE` and `--set dotted.key=value`. Errors that
a user can fix (`gapforge.errors.USER_ERRORS`, one class per boundary; a damaged
store or checkpoint file) are printed as one line on stderr with exit code 2 and no
traceback; a stage left incomplete by infrastructure failures (`IncompleteStage`) or
stopped by a full disk (`DiskFull`, `CheckpointDiskFull`, ENOSPC) as one line with exit 3.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from gapforge.config import GapforgeConfig, load_config
from gapforge.errors import INCOMPLETE_ERRORS, INCOMPLETE_EXIT_CODE, USER_ERRORS, UsageError
from graph.checkpoint import CheckpointerError
from graph.context import StageFailed, StageUnavailable
from store.errors import is_disk_full
from store.redact import redact

console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[str | None, typer.Option("--config", "-c", help="YAML config file")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override: dotted.key=value (repeatable)")]

F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["ConfigOpt", "SetOpt", "USER_ERRORS", "UsageError", "console", "err_console", "fail", "get_config", "handle_errors", "run_config"]


def fail(message: str, code: int = 2) -> None:
    """One line on stderr (URL passwords masked: a message may quote a store or endpoint URL), then exit."""
    err_console.print("[bold red]error:[/] " + escape(redact(message)), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handle_errors(fn: F) -> F:
    """Turn user-fixable errors into one line + exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except INCOMPLETE_ERRORS as e:  # before USER_ERRORS: a full disk (store.errors.DiskFull) is a StoreError too
            fail(str(e).splitlines()[0], INCOMPLETE_EXIT_CODE)
        except (*USER_ERRORS, CheckpointerError) as e:
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
        except (StageFailed, StageUnavailable) as e:  # a stage a command runs cannot work on this run's data / installation
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
        except OSError as e:  # a path or a disk the checks could not foresee: one line, never a traceback
            where = f" ({e.filename})" if e.filename else ""
            if is_disk_full(e):  # nothing is wrong with the input: free space, then run it again
                fail(f"no space left on the disk{where}: free space there, then run the command again (what finished is kept)",
                     INCOMPLETE_EXIT_CODE)
            fail(f"{e.strerror or type(e).__name__}{where}: check the path, its permissions and the free disk space")

    return wrapper  # type: ignore[return-value]


def get_config(config: str | None, overrides: list[str] | None, *, check_workspace: bool = True) -> GapforgeConfig:
    """The config tree; by default also checks (without creating it) that the workspace is a
    writable directory, so a path fault stops the command before any work."""
    from gapforge.paths import check_workspace as _check

    cfg = load_config(config, overrides or [])
    if check_workspace:
        _check(cfg.workspace)
    from envs.tau2.domain import use_data_dir

    use_data_dir(cfg.tau2.data_dir)  # before anything imports tau2; inherited by child processes
    return cfg


def run_config(run_id: str, config: str | None, overrides: list[str] | None, *, check_workspace: bool = True) -> tuple[GapforgeConfig, Any]:
    """(the config of a command on `run_id`, the store): the run's stored config with this invocation's `--config` keys,
    `--set` items and flags (`overrides`, as dotted settings) on top (gapforge/run_config.py); prints the one line naming
    what it overrode, or that an older run stores no config. Unknown run: StoreError (one line, exit 2)."""
    from envs.tau2.domain import use_data_dir
    from gapforge.run_config import resolve, where_overrides
    from gapforge.wiring import open_store

    where = get_config(config, where_overrides(overrides), check_workspace=check_workspace)
    store = open_store(where)
    try:
        resolved = resolve(dict(store.get_run(run_id).config or {}), run_id, where, config, overrides)
    except BaseException:
        store.close()
        raise
    for line in resolved.lines():
        console.print(escape(redact(line)), highlight=False, soft_wrap=True)
    use_data_dir(resolved.cfg.tau2.data_dir)
    return resolved.cfg, store
