"""The composition root's own input errors. Every error of the project derives from the one root in
gapforge/faults.py through its boundary's class, which carries the exit code: the CLI
(gapforge/cli_common.py) prints any `GapforgeError` as one line with that code, so no list of
classes is kept here. Stage services raise them, never print."""

from __future__ import annotations

from gapforge.faults import GapforgeError, InputFault


class ConfigError(InputFault):
    """A bad config file, key or value. The message says what to fix."""


class UsageError(InputFault):
    """Bad command-line or stage input (a path, an id, a count); the message says what to fix."""


def error_line(e: BaseException) -> str:
    """The one line an error is printed as: its message's first line, else its class name."""
    text = str(e)
    return text.splitlines()[0] if text.strip() else type(e).__name__


__all__ = ["ConfigError", "GapforgeError", "UsageError", "error_line"]
