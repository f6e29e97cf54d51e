"""`gapforge env validate PATH`: an env module's self-test (sandbox/checks/README.md) in the sandbox, as a table and a
JSON report. Exit 0 when every required check passes, 1 when one failed, 2 for bad input, 3 when the sandbox or the
policy endpoint kept failing past its retries (the report is written, marked incomplete; nothing blamed on the env).
Sandboxes lost and recovered on the way are listed under the table and in the JSON (`sandbox_faults`). `env show` prints
a synthesized attempt; `env check SPEC` (a target's reward floors and gold ceiling) is gapforge/cli_env_check.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from gapforge.cli_common import ConfigOpt, SetOpt, console, err_console, get_config, handle_errors
from gapforge.cli_env_check import register_check
from gapforge.config import GapforgeConfig
from gapforge.errors import UsageError
from gapforge.paths import check_output_file
from gapforge.wiring import build_deps, open_store

if TYPE_CHECKING:
    from gapforge.agents.validation import ValidationOutcome

app = typer.Typer(
    no_args_is_help=True,
    help="Environments: check a target's reward, self-test a generated env module, show a synthesized one.",
)
register_check(app)  # `env check SPEC` (gapforge/cli_env_check.py)

_COLOUR = dict(
    PASS="bold green", PASSED="bold green", FAIL="bold red", FAILED="bold red", SKIP="yellow", INCOMPLETE="bold yellow"
)


@app.command("validate")
@handle_errors
def validate(
    path: Annotated[Path, typer.Argument(help="the env module (.py) to validate")],
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="target env whose tools must match: any --env spec (shop | mcp:FILE.yaml | trl:FILE.py:Class?rows=FILE | composite:A+B | "
            "package.module:Class | path/to/file.py:Class)",
        ),
    ] = None,
    seeds: Annotated[
        int | None, typer.Option("--seeds", help="seeds per check (default: synthesis.validation_seeds)")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the JSON report here (default: WORKSPACE/validations/)")
    ] = None,
    episodes_from: Annotated[
        str | None,
        typer.Option(
            "--episodes-from",
            metavar="RUN",
            help="compare result formats with the target's episodes stored in RUN (check result_format) "
            "and guard RUN's held-out split (check contamination)",
        ),
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run the self-test checks on PATH in the sandbox."""
    from gapforge.agents.validation import validate_module

    cfg = get_config(config, set_)
    check_output_file(json_out, "--json")  # before the checks run, not after
    shapes, split = _run_evidence(cfg, episodes_from, target) if episodes_from else (None, None)
    n_seeds = seeds if seeds is not None else cfg.synthesis.validation_seeds
    with (
        build_deps(cfg, pool_size=min(cfg.sandbox.pool_size, 2)) as deps,
        console.status(f"validating {path.name} ({n_seeds} seeds)...") as status,
    ):

        async def validate_then_close() -> ValidationOutcome:
            # One loop: the policy this command makes is used and closed on it (its HTTP session is this loop's).
            policy = deps.make_policy() if cfg.policy.kind != "scripted" else None
            try:
                return await validate_module(
                    deps,
                    path,
                    seeds=n_seeds,
                    target=target,
                    policy=policy,
                    report_dir=cfg.workspace / "validations",
                    json_out=json_out,
                    target_result_shapes=shapes,
                    split_texts=split,
                    progress=lambda name: status.update(f"validating {path.name}: check [bold]{name}[/] ..."),
                    checks=deps.sandbox_checks,  # None: in this machine's sandbox
                )
            finally:
                await deps.aclose_policies()

        outcome = asyncio.run(validate_then_close())  # the validation's one sync entry
    report = outcome.report
    _print_table(report)
    if faults := report.faults_line():
        console.print(
            f"[yellow]sandbox faults:[/] {faults} (not the env's doing; see sandbox_faults in the JSON)",
            highlight=False,
        )
    verdict = "INCOMPLETE" if report.incomplete is not None else "PASSED" if outcome.passed else "FAILED"
    console.print(
        f"[{_COLOUR[verdict]}]{verdict}[/] in {report.seconds:.1f}s; JSON report: {outcome.json_path}", highlight=False
    )
    if outcome.note:
        err_console.print(f"warning: {outcome.note}", highlight=False)
    if report.incomplete is not None:
        from gapforge.agents.infra import stop_for_report

        raise stop_for_report(
            f"validation of {path.name}",
            report.incomplete,
            f"the incomplete report is at {outcome.json_path}",
            resume=f"gapforge env validate {path}",
        )
    raise typer.Exit(0 if outcome.passed else 1)


def _run_evidence(cfg: GapforgeConfig, run_id: str, target: str | None) -> tuple[dict[str, Any], Any]:
    """Result shapes of the target's tools in the episodes stored for RUN, and RUN's openings by split (None: no split)."""
    from gapforge.agents.analysis.split import split_openings
    from gapforge.sandbox.checks.result_shapes import observed_result_shapes

    if not target:
        raise UsageError("--episodes-from needs --target (the env whose stored episodes to compare with)")
    with open_store(cfg, must_exist=True) as store:
        episodes = store.episodes(run_id, env=target)
        split = split_openings(store, run_id, target, unseen_env=cfg.evaluation.unseen_env) if episodes else None
    if not episodes:
        raise UsageError(f"run {run_id!r} has no stored episode of env {target!r}: collect rollouts first")
    if split is None:
        console.print(
            f"run {run_id} has no task split yet (`gapforge analyze {run_id}` makes one): check contamination has "
            "no held-out opening to guard",
            highlight=False,
        )
    return observed_result_shapes(e.messages for e in episodes), split


def _print_table(report: Any) -> None:
    title = f"self-test of {Path(report.module).name}" + (f" ({report.capability})" if report.capability else "")
    table = Table("check", "verdict", "s", "evidence", title=title, show_lines=False)
    table.columns[2].justify = "right"
    for check in report.checks:
        table.add_row(
            check.name + ("" if check.required else " (optional)"),
            f"[{_COLOUR[check.verdict]}]{check.verdict}[/]",
            f"{check.seconds:.2f}",
            check.summary[:240],
        )
    console.print(table)


@app.command("show")
@handle_errors
def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    capability: Annotated[str, typer.Argument(metavar="CAPABILITY")],
    attempt: Annotated[
        int | None, typer.Option("--attempt", help="attempt number (default: the accepted one, else the last)")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """A synthesized env attempt of a run: code path, hash, status, self-test report, verdict."""
    from gapforge.store.workspace import Workspace

    cfg = get_config(config, set_)
    with open_store(cfg, must_exist=True) as store:
        rows = store.synthetic_envs(run_id, capability)
        if not rows:
            raise UsageError(
                f"no synthesized env for capability {capability!r} in run {run_id!r}: run `gapforge synthesize {run_id}`"
            )
        by_attempt = {r.attempt: r for r in rows}
        if attempt is not None and attempt not in by_attempt:
            raise UsageError(f"--attempt {attempt}: capability {capability!r} has attempts {sorted(by_attempt)}")
        row = (
            by_attempt[attempt] if attempt is not None else next((r for r in rows if r.status == "accepted"), rows[-1])
        )
        stored = store.get_validation(row.id)
    path = Workspace(cfg.workspace).attempt_module(run_id, capability, row.attempt)
    if not path.is_file():  # e.g. another machine's workspace: write the stored code out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(row.code)
    console.print(f"[bold]{capability}[/] attempt {row.attempt}/{len(rows)}: {row.status}", highlight=False)
    console.print(
        f"code: {path}\nsha256: {row.sha256}\ngenerator prompt: {row.prompt_name}@{row.prompt_version}", highlight=False
    )
    if stored is None:
        console.print("no verdict stored yet (the attempt was interrupted; `gapforge synthesize` resumes it)")
        return
    record = stored.report
    gate = record.get("gate") or {}
    if not gate.get("passed", True):
        console.print("[bold red]static gate rejected it:[/] " + "; ".join(gate.get("problems", [])), highlight=False)
    if record.get("report"):
        from gapforge.sandbox.checks.report import ValidationReport

        data = record["report"]
        report = ValidationReport.model_validate(
            {k: v for k, v in data.items() if k != "passed"}
            | {"checks": [{k: v for k, v in c.items() if k != "verdict"} for c in data["checks"]]}
        )
        _print_table(report)
    console.print(f"verdict: {record.get('feedback')}", highlight=False)
