"""Generated env code for reading: highlighted on the server (Pygments, CSS classes, no script), and the unified diff
between two attempts. Pygments escapes the code it formats, so an env module full of `<script>` stays text."""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Any

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

MAX_HIGHLIGHT_CHARS = 400_000  # past this, plain escaped text (highlighting a huge module costs seconds)


def _highlighted(text: str, lexer: Any, css: str, **options: Any) -> Markup:
    if len(text) > MAX_HIGHLIGHT_CHARS:
        return Markup('<div class="code"><pre>{}</pre></div>').format(text)
    return Markup(highlight(text, lexer, HtmlFormatter(cssclass=css, wrapcode=True, **options)))


@lru_cache(maxsize=32)  # an env's page is opened again and again while debugging it; the code never changes
def python(code: str) -> Markup:
    return _highlighted(code, PythonLexer(), "code", linenos="inline")


@lru_cache(maxsize=32)
def diff(before: str, after: str, before_name: str, after_name: str) -> tuple[Markup, int, int]:
    """(highlighted unified diff, lines added, lines removed)."""
    lines = list(
        difflib.unified_diff(before.splitlines(), after.splitlines(), before_name, after_name, lineterm="", n=3)
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    return _highlighted("\n".join(lines) + "\n", DiffLexer(), "code diff"), added, removed
