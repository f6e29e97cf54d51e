"""The composition root's own input error (exit 2, gapforge/faults.py); the CLI (gapforge/cli_common.py) prints any
`GapforgeError` as one line with its class's exit code. Stage services raise them, never print."""

from __future__ import annotations

from gapforge.faults import GapforgeError, InputFault


class UsageError(InputFault):
    """Bad config (file, key, value), command-line or stage input (a path, an id, a count); the message says what to fix."""


ConfigError = UsageError  # one class: no catch site tells a config fault from another input fault


def error_line(e: BaseException) -> str:
    """The one line an error is printed as: its message's first line, else its class name."""
    text = str(e)
    return text.splitlines()[0] if text.strip() else type(e).__name__


__all__ = ["ConfigError", "GapforgeError", "UsageError", "error_line"]
