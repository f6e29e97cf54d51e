"""The viewer's web app: `create_app(settings)` -> a FastAPI app that only reads.

Only GET routes exist. Pages are Jinja2 templates with autoescape on (every stored text, LLM-written or not, is
escaped); live parts poll with the vendored htmx (ui/static); a Content-Security-Policy allows scripts and styles from
this server only, so even a string that escaped escaping could not run. Hosts other than the ones it serves are refused
(a web page cannot reach it through DNS rebinding). Errors are one page with one line: no store yet, an unknown id, a
store it cannot read, or an internal error (its traceback goes to the server log, never to the page).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from gapforge.graph.checkpoint import CheckpointerError
from gapforge.store.errors import NoStore, StoreError
from gapforge.ui.render import NotFound, render, templates
from gapforge.ui.sources import Sources, UiSettings

log = logging.getLogger("gapforge.ui")
# resources beside this module: the same files from a checkout, an editable install or a wheel, whatever the working directory
STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    return render(request, "error.html", status=status, title=title, message=message)


async def _store_error(request: Request, exc: Exception) -> Response:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if text.startswith("unknown "):
        return _error_page(request, 404, "Not found", text)
    return _error_page(request, 503, "Cannot read the store", text)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _error_page(request, 405, "Read-only", "this viewer only reads: nothing here can be changed")
    return _error_page(request, exc.status_code, "Not found" if exc.status_code == 404 else "Error", str(exc.detail))


async def _internal(request: Request, exc: Exception) -> Response:
    log.exception("gapforge ui: %s %s failed", request.method, request.url.path)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return _error_page(
        request, 500, "Internal error", f"{type(exc).__name__}: {first} (the server log has the details)"
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error_page(request, 404, "No store yet" if isinstance(exc, NoStore) else "Not found", str(exc))


def create_app(settings: UiSettings) -> FastAPI:
    from gapforge.ui import pages_analysis, pages_artifacts, pages_runs

    src = Sources(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await src.aclose()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.sources = src
    app.state.templates = templates()
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts))

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1000:.1f}"  # bench/ui.py reads it
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    for kind, handler in ((NoStore, _not_found), (NotFound, _not_found), (StoreError, _store_error)):
        app.add_exception_handler(kind, handler)
    for kind, handler in ((CheckpointerError, _store_error), (HTTPException, _http_error), (Exception, _internal)):
        app.add_exception_handler(kind, handler)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (pages_runs, pages_analysis, pages_artifacts):
        app.include_router(module.router)
    return app
