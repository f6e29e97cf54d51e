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
    template: str | None = typer.Option(None, "--template", help="a chat template TRL ships, by name (e.g. qwen3: Qwen3's stock "
                                                                "template), instead of the tiny one"),
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Build a tiny Qwen-architecture model offline (random weights, tokenizer trained on the spot)."""
    from gapforge.paths import check_output_dir

    check_output_dir(path, "model path")
    if seed is None:
        seed = get_config(config, set_).seed
    if path.is_dir() and (path / "config.json").exists():
        console.print(f"overwriting the model in {path}", highlight=False)
    from transformers.utils import logging as hf_logging

    from serving.chat_format import stock_template
    from serving.tiny_model import build_tiny_model

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
    from serving.chat_format import chat_format
    from serving.errors import ServingError

    if not (model / "tokenizer_config.json").is_file():
        raise ServingError(f"{model} has no tokenizer_config.json: give the local model directory (e.g. huggingface-cli download ... --local-dir DIR)")
    from transformers import AutoTokenizer

    fmt = chat_format(AutoTokenizer.from_pretrained(model, local_files_only=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(fmt.template, encoding="utf-8")
    console.print(f"{out}: {fmt.family} ({fmt.source}), tool calls {fmt.tool_format}"
                  + (f"; versus the stock template it throws away {fmt.dropped}" if fmt.dropped else ""), highlight=False, soft_wrap=True)


@app.command("teach")
@handle_errors
def teach_cmd(
    out: Path = typer.Option(Path(".gapforge/models"), "--out", help="directory the taught model goes under (cached by recipe hash)"),
    epochs: float | None = typer.Option(None, "--epochs", help="SFT epochs (default: the recipe's)"),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="report pass rates per family on THE shop's tasks (instance 0: never taught on)"),
    samples: int = typer.Option(2, "--samples", min=1, help="episodes per task at temperature 1.0"),
    greedy: bool = typer.Option(True, "--greedy/--no-greedy", help="also report greedy (temperature 0) pass rates"),
) -> None:
    """Teach the tiny base policy of the offline demo on shop gold trajectories (with the planted deficit)."""
    from training.teach import TeachConfig, teach

    cfg = TeachConfig() if epochs is None else TeachConfig(epochs=epochs)
    path = teach(out, cfg, progress=lambda m: console.print(m, highlight=False))
    console.print(f"taught model: {path.resolve()}  (set policy.local_path to it)", highlight=False)
    if evaluate:
        from envs.shop import ShopEnv
        from training.evaluate import load_policy, pass_rates
        from training.teach import load_meta

        meta = load_meta(path)
        model, tok = load_policy(path)
        env = ShopEnv()
        runs = [("temperature 1.0", 1.0, samples)] + ([("greedy", 0.0, 1)] if greedy else [])
        for label, temperature, n in runs:
            rates = pass_rates(model, tok, ShopEnv, meta["eval_tasks"], env.task_family, samples=n, temperature=temperature)
            console.print(f"shop tasks (instance 0, unseen), {label}:", highlight=False)
            for fam, r in rates.items():
                console.print(f"  {fam:22s} pass {r['pass_rate']:.0%}  mean reward {r['mean_reward']:.2f}  ({r['episodes']} episodes)",
                              highlight=False)
