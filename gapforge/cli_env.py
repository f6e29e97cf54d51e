"""`gapforge env validate PATH`: the self-test of a synthetic env module (DESIGN.md §5),
run in the sandbox. Prints a table and writes the JSON report; exit 0 only when
every required check passes, 1 when one failed, 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    get_config,
    handle_errors,
)
from gapforge.config import GapforgeConfig

app = typer.Typer(no_args_is_help=True, help="Synthetic environments: self-test a generated env module.")

_STYLE = {"PASS": "[bold green]PASS[/]", "FAIL": "[bold red]FAIL[/]", "SKIP": "[yellow]SKIP[/]"}


@app.command("validate")
@handle_errors
def validate(
    path: Annotated[Path, typer.Argument(help="the env module (.py) to validate")],
    target: Annotated[str | None, typer.Option("--target", help="target env whose tools must match: shop | tau2:retail | ...")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="seeds per check (default: synthesis.validation_seeds)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the JSON report here (default: WORKSPACE/validations/)")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run the self-test checks on PATH in the sandbox."""
    cfg = get_config(config, set_)
    report, out = run_validation(cfg, path, target=target, seeds=seeds, json_out=json_out)
    raise typer.Exit(0 if report.passed else 1)


def run_validation(cfg: GapforgeConfig, path: Path, *, target: str | None = None, seeds: int | None = None,
                   json_out: Path | None = None) -> tuple[Any, Path]:
    """Validate one env module in the sandbox, print the table, write the JSON report."""
    from sandbox.checks import validate_env

    if not path.is_file() or path.suffix != ".py":
        raise UsageError(f"env module '{path}' not found: give the path of a .py file")
    n_seeds = seeds if seeds is not None else cfg.synthesis.validation_seeds
    if n_seeds < 2:
        raise UsageError(f"--seeds {n_seeds}: need at least 2 seeds to compare scenarios")
    target_tools = _target_tools(target) if target else None
    policy, runner, policy_note = _grpo_policy(cfg)

    from sandbox.env import open_env
    from sandbox.pool import SandboxPool

    with (
        SandboxPool(cfg.sandbox, size=min(cfg.sandbox.pool_size, 2)) as pool,
        console.status(f"validating {path.name} ({n_seeds} seeds)...") as status,
    ):
        report = validate_env(
            lambda: open_env(path, cfg.sandbox, pool),
            target_tools=target_tools, seeds=n_seeds, policy=policy, run_episode=runner,
            readiness=cfg.grpo_readiness, module=path, target=target,
            progress=lambda name: status.update(f"validating {path.name}: check [bold]{name}[/] ..."),
        )
    if policy_note and report.check("grpo_ready").skipped:
        report.check("grpo_ready").summary = policy_note
    _print_table(report)
    out = json_out or cfg.workspace / "validations" / f"{path.stem}-{(report.module_sha256 or '')[:8]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.to_json(), indent=2, default=str))
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    console.print(f"{verdict} in {report.seconds:.1f}s; JSON report: {out}", highlight=False)
    return report, out


def _print_table(report: Any) -> None:
    title = f"self-test of {Path(report.module).name}" + (f" ({report.capability})" if report.capability else "")
    table = Table(title=title, show_lines=False)
    table.add_column("check")
    table.add_column("verdict")
    table.add_column("s", justify="right")
    table.add_column("evidence")
    for check in report.checks:
        table.add_row(check.name + ("" if check.required else " (optional)"), _STYLE[check.verdict], f"{check.seconds:.2f}", check.summary[:240])
    console.print(table)


def _target_tools(name: str) -> list[dict[str, Any]]:
    """The target env's tool schemas (unknown name -> envs.errors.EnvError -> one line, exit 2)."""
    from envs.registry import make_env

    env = make_env(name)
    try:
        return env.tools()
    finally:
        env.close()


def _grpo_policy(cfg: GapforgeConfig) -> tuple[Any, Any, str | None]:
    """(policy, episode runner, why-skipped) for the GRPO-readiness check."""
    if cfg.policy.kind == "scripted":
        return None, None, "skipped: no policy to sample (policy.kind is scripted; set policy.kind endpoint|local)"
    from agents.policy import run_episode
    from gapforge.wiring import make_policy

    policy = make_policy(cfg.policy)
    max_turns = cfg.rollouts.max_turns

    async def runner(pol: Any, env: Any, seed: int, temperature: float) -> Any:
        return await run_episode(pol, env, seed, max_turns=max_turns, temperature=temperature)

    return policy, runner, None
