"""`gapforge ui`: the read-only web viewer of the configured store (ui/)."""

from __future__ import annotations

from typing import Annotated

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    check_can_listen,
    console,
    err_console,
    get_config,
    handle_errors,
)
from gapforge.store.redact import redact

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(host: str) -> tuple[str, ...]:
    """Host headers the viewer answers: the loopback names and the host it binds; every name when bound to all interfaces."""
    return ("*",) if host in ("0.0.0.0", "::", "") else tuple(dict.fromkeys((*LOOPBACK_NAMES, host)))


def register(app: typer.Typer) -> None:
    @app.command("ui")
    @handle_errors
    def ui(
        port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8765,
        host: Annotated[
            str, typer.Option("--host", help="interface to bind (default: this machine only)")
        ] = "127.0.0.1",
        refresh: Annotated[
            float, typer.Option("--refresh", min=0.2, help="seconds between refreshes of a running run's live parts")
        ] = 2.0,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """A read-only web viewer of the store: runs, lineage (episodes -> labels -> capabilities -> envs -> adapters -> evaluation)."""
        from gapforge.agents.config import is_loopback

        try:
            import uvicorn

            from gapforge.ui.app import create_app
            from gapforge.ui.sources import UiSettings
        except ImportError as e:
            raise UsageError(
                f"gapforge ui needs the ui extra ({e.name} is not installed): pip install 'gapforge[ui]'"
            ) from None

        cfg = get_config(config, set_, check_workspace=False)  # it writes nothing: the workspace need not be writable
        if not is_loopback(host):
            err_console.print(
                f"warning: serving on {host}: anyone who reaches port {port} can read every trajectory, config and "
                "code in this store (no login); bind 127.0.0.1 (the default) unless this network is trusted",
                highlight=False,
                soft_wrap=True,
            )
        check_can_listen(host, port)
        settings = UiSettings(
            cfg.store_url, cfg.checkpoint_path, cfg.workspace, refresh, allowed_hosts=allowed_hosts(host)
        )
        shown = f"[{host}]" if ":" in host else host
        console.print(
            f"gapforge ui (read-only) on http://{shown}:{port}/ over {redact(cfg.store_url)}; Ctrl-C stops it",
            highlight=False,
            soft_wrap=True,
        )
        try:
            uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", access_log=False)
        except KeyboardInterrupt:  # uvicorn shut down, then raised the Ctrl-C / SIGTERM it caught: the way to stop it
            console.print("gapforge ui stopped", highlight=False)
