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


def wait_until_listening(proc: Any, port: int, *, what: str, timeout_s: float = 60.0) -> None:
    """Wait until `proc` (a subprocess.Popen, text mode) accepts connections on 127.0.0.1:`port`; AssertionError with the
    end of what it printed (whatever of stdout / stderr is piped) when it exits first or takes longer than `timeout_s`
    (it is killed then)."""
    import socket
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                printed = "".join(part or "" for part in proc.communicate())
                raise AssertionError(f"{what} did not start: {printed[-3000:]}") from None
            time.sleep(0.1)


def run_id_in(output: str) -> str:
    """The run id a command printed first as `run ID` (its first line; found by its own line, so output another thread
    wrote into a CliRunner's capture first does not shift it)."""
    import re

    found = re.search(r"^run (\S+)$", output, re.MULTILINE)
    assert found, output
    return found.group(1)
