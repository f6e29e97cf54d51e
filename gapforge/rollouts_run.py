"""A `rollouts collect` run's identity and plan: the task ids it collects, the command that resumes it, and the check
that refuses work that does not belong to it (used by gapforge/cli_rollouts.py)."""

from __future__ import annotations

from gapforge.errors import UsageError


def parse_tasks(raw: str | None, known: list[str]) -> list[str]:
    """--tasks as given (each once, in order; None: every known task); an empty or unknown id is one line, exit 2."""
    if raw is None:
        return known
    wanted = list(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))  # once each, in order
    if not wanted:
        raise UsageError(
            f"--tasks {raw!r} names no task: give comma-separated ids (list them with `gapforge rollouts tasks ENV`) or omit it for all"
        )
    unknown = [t for t in wanted if t not in set(known)]
    if unknown:
        raise UsageError(f"unknown task id(s) {', '.join(unknown)}: list them with `gapforge rollouts tasks ENV`")
    return wanted


def resume_command(run_id: str, config: str | None) -> str:
    """The command that plays what a run still lacks."""
    return f"gapforge rollouts collect --run {run_id}" + (f" --config {config}" if config else "")


def check_identity(run_row, env_name: str, policy_name: str | None) -> None:
    """A run collects one env with one policy: refuse work that does not belong to it (policy None: the env only)."""
    stored = run_row.config or {}
    if run_row.kind != "rollouts":
        raise UsageError(f"run {run_row.id} is a {run_row.kind} run, not a rollouts run: start a new one (omit --run)")
    for what, mine in (("env", env_name), ("policy", policy_name)):
        theirs = stored.get(what)
        if theirs is not None and mine is not None and theirs != mine:
            raise UsageError(
                f"run {run_row.id} collects env {stored.get('env')!r} with policy {stored.get('policy')!r}, not {what} {mine!r}: "
                "resume it with its own env and policy, or start a new run (omit --run)"
            )
