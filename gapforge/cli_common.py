"""Shared CLI plumbing: the `--config FILE` / `--set dotted.key=value` options every command takes, the console, and the
one error policy: every error of the project (`gapforge.faults.GapforgeError`) is one line on stderr, no traceback, with
the exit code its boundary's class carries (gapforge/faults.py; a full disk: 3, resumable)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from gapforge.config import GapforgeConfig, load_config
from gapforge.errors import GapforgeError, error_line
from gapforge.errors import UsageError as UsageError  # re-exported for the commands
from gapforge.store.errors import DiskFull, is_disk_full
from gapforge.store.redact import redact

console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[str | None, typer.Option("--config", "-c", help="YAML config file")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override: dotted.key=value (repeatable)")]
RunArg = Annotated[str, typer.Argument(help="run id")]

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> None:
    """One line on stderr (URL passwords masked: a message may quote a store or endpoint URL), then exit."""
    err_console.print("[bold red]error:[/] " + escape(redact(message)), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail_error(e: GapforgeError, *, resume: str | None = None) -> None:
    """The one mapping from an error of ours to the CLI: its first line, its class's `exit_code`. With `resume`
    (the command that continues this run) the line says it: a stop that knows how (`with_resume`) words it
    itself, another infrastructure failure gets ": resume with ...", anything else "(fix it, then ...)"."""
    line = error_line(e)
    if resume is not None:
        if callable(getattr(e, "with_resume", None)):
            line = error_line(e.with_resume(resume))  # type: ignore[attr-defined]
        else:
            line += f": resume with `{resume}`" if e.infrastructure else f" (fix it, then `{resume}`)"
    fail(line, e.exit_code)


def handle_errors(fn: F) -> F:
    """Turn every error of ours into one line and its boundary's exit code (an OSError no check foresaw too)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (gapforge.cli): stored work is kept; a command said more itself
            fail("interrupted: what finished is kept; run the same command again to go on", 130)
        except GapforgeError as e:  # one place for every boundary: gapforge/faults.py says the code
            fail_error(e)
        except OSError as e:  # a path or a disk the checks could not foresee: one line, never a traceback
            where = f" ({e.filename})" if e.filename else ""
            if is_disk_full(e):  # nothing is wrong with the input: free space, then run it again
                fail(
                    f"no space left on the disk{where}: free space there, then run the command again (what finished is kept)",
                    DiskFull.exit_code,
                )
            fail(f"{e.strerror or type(e).__name__}{where}: check the path, its permissions and the free disk space")

    return wrapper  # type: ignore[return-value]


def get_config(config: str | None, overrides: list[str] | None, *, check_workspace: bool = True) -> GapforgeConfig:
    """The config tree; by default also checks (without creating it) that the workspace is a
    writable directory, so a path fault stops the command before any work."""
    from gapforge.paths import check_workspace as _check

    cfg = load_config(config, overrides or [])
    if check_workspace:
        _check(cfg.workspace)
    from gapforge.envs.tau2.domain import use_data_dir

    use_data_dir(cfg.tau2.data_dir)  # before anything imports tau2; inherited by child processes
    return cfg


def run_config(
    run_id: str, config: str | None, overrides: list[str] | None, *, check_workspace: bool = True
) -> tuple[GapforgeConfig, Any]:
    """(the config of a command on `run_id`, the store): the run's stored config with this invocation's `--config` keys,
    `--set` items and flags (`overrides`, as dotted settings) on top (gapforge/run_config.py); prints the one line naming
    what it overrode, or that an older run stores no config. Unknown run: StoreError (one line, exit 2)."""
    from gapforge.envs.tau2.domain import use_data_dir
    from gapforge.run_config import resolve, where_overrides
    from gapforge.wiring import open_store

    where = get_config(config, where_overrides(overrides), check_workspace=check_workspace)
    store = open_store(where, must_exist=True)  # a command on a run: the run's store is there, or said where it looked
    try:
        resolved = resolve(dict(store.get_run(run_id).config or {}), run_id, where, config, overrides)
    except BaseException:
        store.close()
        raise
    for line in resolved.lines():
        console.print(escape(redact(line)), highlight=False, soft_wrap=True)
    use_data_dir(resolved.cfg.tau2.data_dir)
    return resolved.cfg, store


def check_can_listen(host: str, port: int) -> None:
    """`host:port` can be bound now (port 0: any free one), said before any model loads: in use, or no such host."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port} ({e.strerror or e}): pass another --port or --host") from None
