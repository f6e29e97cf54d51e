"""`gapforge dev ...`: developer helpers (offline tiny model)."""

from __future__ import annotations

from pathlib import Path

import typer

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors

app = typer.Typer(no_args_is_help=True, help="Developer helpers: offline tiny model for tests and the demo.")


@app.command("tiny-model")
@handle_errors
def tiny_model(
    path: Path = typer.Argument(..., help="directory to write the model into (created if missing)"),
    seed: int | None = typer.Option(None, "--seed", help="seed for the random weights (default: the config's seed)"),
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Build a tiny Qwen-architecture model offline (random weights, tokenizer trained on the spot)."""
    if seed is None:
        seed = get_config(config, set_).seed
    if path.is_dir() and (path / "config.json").exists():
        console.print(f"overwriting the model in {path}", highlight=False)
    from transformers.utils import logging as hf_logging

    from serving.tiny_model import build_tiny_model

    hf_logging.disable_progress_bar()
    out = build_tiny_model(path, seed=seed)
    console.print(f"tiny model (seed {seed}) written to {out.resolve()}:", highlight=False)
    for file in sorted(out.iterdir()):
        console.print(f"  {file.name}  {file.stat().st_size} bytes", highlight=False)
