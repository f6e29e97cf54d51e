"""`gapforge dev ...`: developer helpers (offline tiny model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gapforge.cli_common import ConfigOpt, SetOpt, UsageError, console, get_config, handle_errors

app = typer.Typer(no_args_is_help=True, help="Developer helpers: offline tiny model for tests and the demo.")


@app.command("tiny-model")
@handle_errors
def tiny_model(
    path: Path = typer.Argument(..., help="directory to write the model into (created if missing)"),
    seed: int | None = typer.Option(None, "--seed", help="seed for the random weights (default: the config's seed)"),
    template: str | None = typer.Option(
        None,
        "--template",
        help="a chat template TRL ships, by name (e.g. qwen3: Qwen3's stock template), instead of the tiny one",
    ),
    force: bool = typer.Option(False, "--force", help="replace a model already in PATH"),
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Build a tiny Qwen-architecture model offline (random weights, tokenizer trained on the spot)."""
    from gapforge.paths import check_output_dir

    check_output_dir(path, "model path")
    if seed is None:
        seed = get_config(config, set_).seed
    if path.is_dir() and (path / "config.json").exists():
        if not force:  # random weights over a real model would be lost work
            raise UsageError(f"'{path}' already holds a model (config.json): pick another directory, or pass --force")
        console.print(f"overwriting the model in {path}", highlight=False)
    from transformers.utils import logging as hf_logging

    from gapforge.serving.chat_format import stock_template
    from gapforge.serving.tiny_model import build_tiny_model

    hf_logging.disable_progress_bar()
    out = build_tiny_model(path, seed=seed, template=stock_template(template) if template else None)
    console.print(f"tiny model (seed {seed}) written to {out.resolve()}:", highlight=False)
    for file in sorted(out.iterdir()):
        console.print(f"  {file.name}  {file.stat().st_size} bytes", highlight=False)


@app.command("chat-template")
@handle_errors
def chat_template_cmd(
    model: Path = typer.Argument(..., help="a local Hugging Face model directory (its tokenizer's chat template)"),
    out: Path = typer.Option(..., "--out", help="file to write the template into (vLLM: --chat-template FILE)"),
) -> None:
    """Write the chat template gapforge trains and serves this model with (its family's training template)."""
    from gapforge.serving.chat_format import chat_format
    from gapforge.serving.errors import ServingError

    if not (model / "tokenizer_config.json").is_file():
        raise ServingError(
            f"{model} has no tokenizer_config.json: give the local model directory (e.g. huggingface-cli download ... --local-dir DIR)"
        )
    from transformers import AutoTokenizer

    fmt = chat_format(AutoTokenizer.from_pretrained(model, local_files_only=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(fmt.template, encoding="utf-8")
    console.print(
        f"{out}: {fmt.family} ({fmt.source}), tool calls {fmt.tool_format}"
        + (f"; versus the stock template it throws away {fmt.dropped}" if fmt.dropped else ""),
        highlight=False,
        soft_wrap=True,
    )


@app.command("teach")
@handle_errors
def teach_cmd(
    out: Path = typer.Option(
        Path(".gapforge/models"),
        "--out",
        help="directory the taught model goes under (cached by recipe hash, and for a "
        "polish by the weights it continues)",
    ),
    recipe: Path | None = typer.Option(
        None,
        "--recipe",
        help="a teach.json (e.g. gapforge/demo_data/shop-policy/teach.json): rebuild exactly its recipe",
    ),
    epochs: float | None = typer.Option(None, "--epochs", help="SFT epochs (default: the recipe's)"),
    first_pass: Path | None = typer.Option(
        None,
        "--first-pass",
        help="a finished build of this recipe apart from its polish (a first pass, or a "
        "polished build to continue): only the polish pass runs, from its weights",
    ),
    ship_it: bool = typer.Option(
        False,
        "--ship",
        help="measure the build as the demo collects and copy it to gapforge/demo_data/shop-policy/ "
        "(the demo's base policy)",
    ),
    evaluate: bool = typer.Option(
        True, "--eval/--no-eval", help="report pass rates per family on THE shop's tasks (instance 0: never taught on)"
    ),
    samples: int = typer.Option(
        6, "--samples", min=1, help="episodes per task, sampled as the demo collects (temperature 0.7)"
    ),
) -> None:
    """Teach the tiny base policy of the offline demo on shop gold trajectories (with the planted deficits)."""

    from gapforge.demo_policy.artifact import weights_sha256
    from gapforge.demo_policy.teach import TeachConfig, load_meta, teach

    card: dict = {}
    if recipe is not None:
        if not recipe.is_file():
            raise UsageError(
                f"--recipe {recipe}: no such file (give a teach.json, e.g. gapforge/demo_data/shop-policy/teach.json)"
            )
        card, cfg = _read_recipe(recipe)
    else:
        cfg = TeachConfig()
    if epochs is not None:
        cfg = cfg.model_copy(update={"epochs": epochs})
    if first_pass is not None and not (first_pass / "teach.json").is_file():
        raise UsageError(
            f"--first-pass {first_pass}: no finished build there (a directory with teach.json, e.g. gapforge/demo_data/shop-policy)"
        )
    if first_pass is not None and not cfg.polish_epochs:
        raise UsageError("--first-pass needs a recipe with polish_epochs > 0 (there is nothing to continue)")
    parent = card.get("first_pass") or {}  # _read_recipe checked its shape
    if parent.get("polish"):  # its polish continued a polished build: both passes from scratch would make another model
        if first_pass is None:
            raise UsageError(
                f"--recipe {recipe}: its polish continued a polished build (recipe {parent['recipe_hash']}, weights sha256 "
                f"{parent['weights_sha256'][:12]}): give that build with --first-pass DIR (demo_policy/README.md says how)"
            )
        have = weights_sha256(first_pass)
        if have != parent["weights_sha256"]:
            raise UsageError(
                f"--first-pass {first_pass}: its weights (sha256 {have[:12]}) are not the build this recipe continued "
                f"({parent['weights_sha256'][:12]}; demo_policy/README.md says how to get it)"
            )
    try:
        path = teach(out, cfg, progress=lambda m: console.print(m, highlight=False), first_pass=first_pass)
    except ValueError as e:
        raise UsageError(str(e)) from None
    built = load_meta(path)["recipe_hash"]  # the hash the build took at its start (the code may have changed since)
    console.print(f"taught model: {path.resolve()}  (recipe {built}; set policy.local_path to it)", highlight=False)
    rates = None
    if ship_it:
        from gapforge.demo_policy.artifact import SHIPPED, describe, load_card, measure, ship

        console.print(
            f"measuring the build as the demo collects (44 tasks x {samples} samples, temperature 0.7) ...",
            highlight=False,
        )
        dest = ship(path, SHIPPED, measure(path, samples=samples))
        console.print(f"shipped: {describe(dest)}", highlight=False)
        rates = load_card(dest)["measured"]["rates"]
    elif evaluate:
        import asyncio

        from gapforge.training.evaluate import shop_rates

        rates = asyncio.run(shop_rates(path, samples=samples))
    if rates is not None:
        console.print(
            f"shop tasks (instance 0, never taught on), {samples} samples per task at temperature 0.7, as the demo collects:",
            highlight=False,
        )
        for fam, r in rates.items():
            share = r.get("failures_skipping_check")
            skip = f"  (failures that skipped the order check: {share:.0%})" if "failures_skipping_check" in r else ""
            console.print(f"  {fam:22s} pass {r['pass_rate']:.0%}  ({r['episodes']} episodes){skip}", highlight=False)


def _read_recipe(recipe: Path) -> tuple[dict, Any]:
    """A teach.json's card and its recipe as a TeachConfig; a file that is not one is a one-line UsageError naming
    what is wrong (not JSON, no `recipe` object, a bad value in it, a `first_pass` without its hashes)."""
    import json

    from pydantic import ValidationError

    from gapforge.demo_policy.teach import TeachConfig
    from gapforge.faults import first_problem

    def refuse(why: str) -> UsageError:
        return UsageError(f"--recipe {recipe}: not a teach.json whose `recipe` this version reads ({why})")

    try:
        card = json.loads(recipe.read_text())
    except ValueError as e:  # not JSON, or not UTF-8
        raise refuse(str(e).splitlines()[0]) from None
    if not isinstance(card, dict) or not isinstance(card.get("recipe"), dict):
        raise refuse("no `recipe` object")
    parent = card.get("first_pass") or {}
    if not isinstance(parent, dict) or (parent.get("polish") and not {"recipe_hash", "weights_sha256"} <= set(parent)):
        raise refuse("`first_pass` is not an object with recipe_hash and weights_sha256")
    try:
        return card, TeachConfig(**{k: v for k, v in card["recipe"].items() if k != "threads"})
    except ValidationError as e:  # TeachConfig has no model-level check: the location names a field
        raise refuse(f"recipe.{first_problem(e)}") from None
