"""`create_app`: the FastAPI application for one sealed release (the package docstring lists the modules)."""
from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import DEFAULT_STATE
from .release import ReleaseError

STATIC = Path(__file__).with_name("static")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".svg": "image/svg+xml"}


def _static_assets() -> dict[str, tuple[bytes, str]]:
    """Every asset the pages use, read from the package once: served by name, nothing else on disk is reachable."""
    return {path.name: (path.read_bytes(), STATIC_TYPES[path.suffix])
            for path in sorted(STATIC.iterdir()) if path.suffix in STATIC_TYPES}


def create_app(bundle_dir: str | Path, db_url: str | None = None, state_dir: str | Path = DEFAULT_STATE,
               trust: str | Path | None = None, release: str | None = None, site: str | Path | None = None,
               recipient: str | None = None) -> FastAPI:
    """Build the app for one sealed release bundle; raises ReleaseError when the bundle (its signature checked
    against the trust store `trust`, default the site's; its seal as the release `release`, DATASET/ID, default
    where it lies) or the database is refused. `site`: a folder whose outputs.yaml is the floor of the output rules
    (none: ACRO's defaults); `recipient`: who the outputs are recorded as made by."""
    from . import airlock_routes, api, output_routes, pages
    from .context import build_context
    from .security import SecurityMiddleware

    context = build_context(bundle_dir, db_url, state_dir, trust, release, site, recipient)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            context.workspace.close()
            context.release.engine.dispose()

    app = FastAPI(title="safeshare analytics", version="1", docs_url=None, redoc_url=None,
                  swagger_ui_oauth2_redirect_url=None, lifespan=lifespan,
                  description="Aggregate analyses of one sealed, de-identified release. No records leave.")
    app.state.ctx = context
    assets = _static_assets()

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in assets:
            return _not_found_page(f"/static/{name}")
        body, media_type = assets[name]
        return Response(body, media_type=media_type)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/api/") or request.url.path == "/openapi.json":
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        if exc.status_code == 404:
            return _not_found_page(request.url.path)
        return pages.render(request, "error.html", "error", status=exc.status_code, message=str(exc.detail))

    app.include_router(api.router)
    app.include_router(output_routes.router)
    app.include_router(airlock_routes.router)
    app.include_router(pages.router)
    app.include_router(output_routes.page_router)
    app.include_router(airlock_routes.page_router)
    app.add_middleware(SecurityMiddleware)
    return app


def _not_found_page(path: str) -> HTMLResponse:
    from . import pages

    html = pages.env.get_template("error.html").render(
        title="not found", nav="", dataset="", release_id="", query="",
        message=f"There is no page {path}. Nothing can be downloaded or exported from the enclave.")
    return HTMLResponse(html, status_code=404)


__all__ = ["ReleaseError", "create_app"]
