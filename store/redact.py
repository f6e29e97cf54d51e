"""Passwords in URLs never leave their place: `redact("postgresql://u:pw@h/db")` is `postgresql://u:***@h/db`. Used
wherever a URL or a message that may hold one is printed or stored (config show, a run's config, error lines, logs)."""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"
# scheme://user:password@ — the password may hold anything but whitespace and '@' (unencoded '/' included)
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*):(?P<password>[^\s@]*)@")


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@host` URL in it masked."""
    return _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text) if "@" in text else text


def redact_tree(value: Any) -> Any:
    """`redact` applied to every string of plain data (dicts, lists, strings)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    return value


def is_redacted(text: str | None) -> bool:
    return bool(text) and f":{MASK}@" in str(text)


class RedactingFilter(logging.Filter):
    """A logging filter that masks URL passwords in every record it sees (message and arguments)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_log_redaction() -> None:
    """Mask URL passwords in everything logged through the root handlers and logging's last resort."""
    flt = RedactingFilter()
    for handler in [*logging.getLogger().handlers, logging.lastResort]:
        if handler is not None and not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(flt)
