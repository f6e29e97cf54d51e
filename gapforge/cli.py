"""The `gapforge` command. Sub-command groups live in gapforge/cli_*.py."""

from __future__ import annotations

import importlib
import json

import typer
import yaml

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="gapforge: capability-targeted agentic training (TRACE)."
)
config_app = typer.Typer(no_args_is_help=True, help="Inspect the effective configuration.")
app.add_typer(config_app, name="config")


@config_app.command("show")
@handle_errors
def config_show(config: ConfigOpt = None, set_: SetOpt = None, as_json: bool = typer.Option(False, "--json")) -> None:
    """Print the effective config (file + env vars + --set), secrets excluded."""
    cfg = get_config(config, set_, check_workspace=False)  # inspecting the config needs no workspace
    data = cfg.dump()
    if as_json:
        console.print_json(json.dumps(data))
    else:
        console.print(yaml.safe_dump(data, sort_keys=False), highlight=False, end="")


@app.command("demo")
@handle_errors
def demo(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """The whole TRACE graph offline on the built-in shop env: taught tiny model, Docker sandbox,
    GRPO on CPU, router, evaluation; only the LLM roles answer from recordings."""
    from gapforge.demo import run_demo

    raise typer.Exit(run_demo(get_config(config, set_), set_))


def _register_groups() -> None:
    """Attach the sub-command groups that exist (each module defines `app`)."""
    import importlib

    for module_name, group in (
        ("gapforge.cli_dev", "dev"),
        ("gapforge.cli_rollouts", "rollouts"),
        ("gapforge.cli_env", "env"),
        ("gapforge.cli_toolsandbox", "toolsandbox"),
        ("gapforge.cli_sandbox", "sandbox"),
        ("gapforge.cli_serve", ""),  # top-level commands: module.register(app)
        ("gapforge.cli_report", ""),
        ("gapforge.cli_synthesize", ""),
        ("gapforge.cli_train", ""),  # `train RUN`
        ("gapforge.cli_adapters", ""),  # `adapters RUN`
        ("gapforge.cli_run", ""),  # run, runs, state, history, fork
        ("gapforge.cli_review", ""),  # review
        ("gapforge.cli_ui", ""),  # `ui`: the read-only web viewer
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == module_name:
                continue
            raise
        if not group:
            module.register(app)
            continue
        app.add_typer(module.app, name=group)


_register_groups()
app.command("analyze")(importlib.import_module("gapforge.cli_analyze").analyze)  # a command, not a group: `analyze RUN`


def main() -> None:
    from gapforge.store.redact import install_log_redaction
    from gapforge.training.deprecations import quiet_library_deprecations

    install_log_redaction()  # URL passwords never reach a log line
    quiet_library_deprecations()  # third-party deprecations nobody using gapforge can act on
    app()


if __name__ == "__main__":
    main()
