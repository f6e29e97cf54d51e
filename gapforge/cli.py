"""The `gapforge` command. Sub-command groups live in gapforge/cli_*.py."""

from __future__ import annotations

import importlib
import json
import signal
import sys
from typing import Annotated

import typer
import yaml

from gapforge.cli_common import ConfigOpt, SetOpt, console, get_config, handle_errors
from gapforge.cli_run import EstimateOpt, ThroughputOpt, print_estimate

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
def demo(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    powered: Annotated[
        bool,
        typer.Option(
            "--powered",
            help="ten shop instances as the target and five more as a second held-out split (unseen records): "
            ">= 40 held-out tasks per family in each split (slower)",
        ),
    ] = False,
    estimate: EstimateOpt = False,
    throughput: ThroughputOpt = None,
) -> None:
    """The whole TRACE graph offline on the built-in shop env: taught tiny model, Docker sandbox,
    GRPO on CPU, router, evaluation; only the LLM roles answer from recordings."""
    from gapforge.demo import demo_config, run_demo, with_base_policy

    if estimate:  # the demo's config, its base policy, nothing run
        cfg = with_base_policy(demo_config(get_config(config, set_), set_, powered=powered), set_)
        print_estimate(cfg, throughput)
        return
    raise typer.Exit(run_demo(get_config(config, set_), set_, powered=powered))


# In `gapforge --help` order: a module with `register(app)` adds top-level commands, any other is the group `app` of its name.
_COMMANDS = "dev rollouts env toolsandbox sandbox serve export report synthesize train adapters run review ui"
for _name in _COMMANDS.split():
    _module = importlib.import_module(f"gapforge.cli_{_name}")
    if hasattr(_module, "register"):
        _module.register(app)
    else:
        app.add_typer(_module.app, name=_name)
app.command("analyze")(importlib.import_module("gapforge.cli_analyze").analyze)  # a command, not a group: `analyze RUN`


def _stop(signum: int, _frame: object) -> None:
    """SIGTERM (`kill PID`, a scheduler stopping the job) is Ctrl-C: the training jobs this process started are
    stopped too, nothing is blamed, the run is resumable (exit 130). Without it the jobs trained on as orphans."""
    jobs = sys.modules.get("gapforge.training.run")  # imported only by a command that launched one
    if jobs is not None:
        jobs.stop_jobs()
    raise KeyboardInterrupt


def main() -> None:
    from gapforge.store.redact import install_log_redaction
    from gapforge.training.deprecations import quiet_library_deprecations

    install_log_redaction()  # URL passwords never reach a log line
    quiet_library_deprecations()  # third-party deprecations nobody using gapforge can act on
    signal.signal(signal.SIGTERM, _stop)  # `serve` drains with its own; `ui` ends on the KeyboardInterrupt (exit 0)
    app()


if __name__ == "__main__":
    main()
