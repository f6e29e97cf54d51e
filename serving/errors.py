"""Errors at the serving boundary (bad input: a `gapforge.faults.InputFault`, exit 2)."""

from gapforge.faults import InputFault


class ServingError(InputFault):
    """Bad serving input (missing model directory, unusable adapter, ...). The message says what to fix."""
