"""Errors at the environment boundary."""


class EnvError(Exception):
    """Bad environment input (unknown env name, unknown task id, ...). The message says what to fix."""
