"""Errors at the store boundary."""


class StoreError(Exception):
    """A store problem the user can fix (bad URL, unreachable server, unknown run id).

    The message is one line and says what to fix; the CLI prints it and exits 2.
    """


class NoStore(StoreError):
    """A read-only open found no store there yet (no SQLite file, or a database without gapforge's tables)."""
