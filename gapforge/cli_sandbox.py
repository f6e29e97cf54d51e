"""`gapforge sandbox ...`: build the sandbox image, sweep leftover containers."""

from __future__ import annotations

import time

import typer

from gapforge.cli_common import ConfigOpt, SetOpt, console, err_console, get_config, handle_errors

app = typer.Typer(no_args_is_help=True, help="The Docker sandbox that runs generated env code.")


@app.command("build-image")
@handle_errors
def build_image_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    method: str = typer.Option("auto", "--method", help="auto | dockerfile | local-python | debootstrap"),
    force: bool = typer.Option(False, "--force", help="rebuild even when the image is current"),
) -> None:
    """Build the sandbox image (tag: sandbox.image) with the first method that works here."""
    from gapforge.sandbox.docker_backend import docker_client
    from gapforge.sandbox.image import build_image

    cfg = get_config(config, set_)
    client = docker_client("start dockerd (the image is built by the Docker daemon)")
    t0 = time.monotonic()
    used = build_image(
        client, cfg.sandbox.image, method=method, force=force, log=lambda s: err_console.print(s, highlight=False)
    )  # type: ignore[arg-type]
    if used == "cached":
        console.print(f"{cfg.sandbox.image} is current (use --force to rebuild)", highlight=False)
    else:
        console.print(f"built {cfg.sandbox.image} with method {used} in {time.monotonic() - t0:.1f}s", highlight=False)


@app.command("sweep")
@handle_errors
def sweep_cmd(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    everything: bool = typer.Option(False, "--all", help="also containers of running gapforge processes"),
) -> None:
    """Remove leftover gapforge sandbox containers (by default those whose owner process is gone)."""
    from gapforge.sandbox.docker_backend import docker_client, sweep

    get_config(config, set_)
    removed = sweep(
        docker_client("start dockerd (containers to sweep live in the Docker daemon)"), everything=everything
    )
    console.print(f"removed {removed} container(s)", highlight=False)
