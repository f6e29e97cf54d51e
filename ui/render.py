"""What every page of the viewer renders with: the Jinja2 environment (autoescape on), `render`, the request's
`sources`, and `NotFound` (ui/app.py turns it into a 404 page). The pages import these, and ui/app.py the pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import ChainableUndefined, Environment, FileSystemLoader

from gapforge.faults import InputFault
from gapforge.ui.format import FILTERS, GLOBALS
from gapforge.ui.links import LINKS
from gapforge.ui.sources import Sources

# beside this module: the same files from a checkout, an editable install or a wheel, whatever the working directory
TEMPLATES = Path(__file__).parent / "templates"


class NotFound(InputFault):
    """An id or name the store does not have; the message says what to look for instead."""


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    env.globals.update(GLOBALS | LINKS)
    return env


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    env: Environment = request.app.state.templates
    html = env.get_template(template).render(
        request=request, poll_s=request.app.state.sources.settings.poll_s, **context
    )
    return HTMLResponse(html, status_code=status)


def sources(request: Request) -> Sources:
    return request.app.state.sources
