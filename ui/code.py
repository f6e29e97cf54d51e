"""Generated env code for reading: highlighted on the server (Pygments, CSS classes, no
script), and the unified diff between two attempts. Pygments escapes the code it formats,
so an env module full of `<script>` stays text."""

from __future__ import annotations

import difflib
from functools import lru_cache

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

MAX_HIGHLIGHT_CHARS = 400_000  # past this, plain escaped text (highlighting a huge module costs seconds)


def _formatter() -> HtmlFormatter:
    return HtmlFormatter(linenos="inline", cssclass="code", wrapcode=True)


@lru_cache(maxsize=32)  # an env's page is opened again and again while debugging it; the code never changes
def python(code: str) -> Markup:
    if len(code) > MAX_HIGHLIGHT_CHARS:
        return Markup('<div class="code"><pre>{}</pre></div>').format(code)
    return Markup(highlight(code, PythonLexer(), _formatter()))


@lru_cache(maxsize=32)
def diff(before: str, after: str, before_name: str, after_name: str) -> tuple[Markup, int, int]:
    """(highlighted unified diff, lines added, lines removed)."""
    lines = list(
        difflib.unified_diff(before.splitlines(), after.splitlines(), before_name, after_name, lineterm="", n=3)
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    text = "\n".join(lines) + "\n"
    if len(text) > MAX_HIGHLIGHT_CHARS:
        return Markup('<div class="code"><pre>{}</pre></div>').format(text), added, removed
    return Markup(highlight(text, DiffLexer(), HtmlFormatter(cssclass="code diff", wrapcode=True))), added, removed
