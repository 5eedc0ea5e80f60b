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

from services.api.models import ProblemDetail
from services.api.openapi import Operation, Reply

STATIC = Path(__file__).parent / "static"
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


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/console",
        jobs_page,
        "consoleJobs",
        "Console: the tenant's jobs, with filters and live status",
        {200: Reply("the page", media=HTML)},
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/console/jobs/{job_id}",
        job_page,
        "consoleJob",
        "Console: one job's timeline, live logs, explanation, outputs and accounting",
        {200: Reply("the page (the job is fetched by its script)", media=HTML)},
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/console/fleet",
        fleet_page,
        "consoleFleet",
        "Console: the fleet",
        {200: Reply("the page", media=HTML)},
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/console/static/{name}",
        asset,
        "consoleAsset",
        "Console: a stylesheet, script or icon",
        {
            200: Reply(
                "the file", media={t: {"schema": {"type": "string"}} for t in ASSET_TYPES.values()}
            ),
            404: Reply("no such asset", ProblemDetail),
        },
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/favicon.ico",
        favicon,
        "favicon",
        "The console's icon",
        {200: Reply("the icon", media={ASSET_TYPES[".ico"]: {"schema": {"type": "string"}}})},
        public=True,
        tags=("console",),
    ),
)
