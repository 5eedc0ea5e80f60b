"""The web console: a few static pages the API serves under ``/console``.

The pages hold no data and need no token; their script asks for the tenant's
API token once, keeps it in the browser's localStorage and sends it as the
bearer on every call to the same ``/v1`` API the CLI uses, so the console sees
exactly what the tenant's token may see. No build step: plain HTML, CSS and
JavaScript files under ``services/api/static/``, and the icon every page links,
also answered at ``/favicon.ico`` (where browsers and other tools look for it).
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC = Path(__file__).parent.parent / "static"
ASSET_TYPES = {
    ".css": "text/css",
    ".js": "text/javascript",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}
TEXT_SUFFIXES = {".css", ".js", ".svg"}
FAVICON = "favicon.ico"
PAGES = {"jobs": "jobs.html", "job": "job.html", "fleet": "fleet.html"}
HTML = {"text/html": {"schema": {"type": "string"}}}


def _page(name: str) -> web.Response:
    return web.Response(
        body=(STATIC / PAGES[name]).read_bytes(),
        content_type="text/html",
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )


async def jobs_page(request: web.Request) -> web.Response:
    """The console's job list."""
    return _page("jobs")


async def job_page(request: web.Request) -> web.Response:
    """The console's page of one job."""
    return _page("job")


async def fleet_page(request: web.Request) -> web.Response:
    """The console's fleet page."""
    return _page("fleet")


def _asset(name: str) -> web.Response:
    path = STATIC / name
    if "/" in name or path.suffix not in ASSET_TYPES or not path.is_file():
        raise web.HTTPNotFound(text=f"no console asset {name}")
    return web.Response(
        body=path.read_bytes(),
        content_type=ASSET_TYPES[path.suffix],
        charset="utf-8" if path.suffix in TEXT_SUFFIXES else None,
        headers={"Cache-Control": "no-cache"},
    )


async def asset(request: web.Request) -> web.Response:
    """One file of the static folder by exact name (no paths, so nothing else is reachable)."""
    return _asset(request.match_info["name"])


async def favicon(request: web.Request) -> web.Response:
    """The console's icon where browsers look for it by default."""
    return _asset(FAVICON)
