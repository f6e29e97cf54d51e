"""Errors at the serving boundary."""


class ServingError(Exception):
    """Bad serving input (missing model directory, unusable adapter, ...). The message says what to fix."""
