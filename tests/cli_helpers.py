"""Helpers for CLI tests (importable from every test folder: pytest puts tests/ on the path)."""

from __future__ import annotations

from typing import Any


def one_line_error(res: Any, needle: str) -> str:
    """A CliRunner result that failed on bad input: exit 2, exactly one `error:` line containing `needle`, no traceback."""
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], res.output
    assert "Traceback" not in res.output
    return errors[0]
