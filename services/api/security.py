"""Security headers on every answer of the API and the console.

The console's pages load only their own script and stylesheet (no inline script,
no inline style attribute: styles are set through the CSSOM), and call only the
API on the same origin, so the policy allows nothing else. The API's JSON answers
get a policy that allows nothing at all. No page may be framed (clickjacking), no
answer sniffed as another type, and an authenticated answer is never stored by a
cache. ``Strict-Transport-Security`` belongs to the TLS terminator in front of
the API, not to this plain-HTTP server (README, "Security model").
"""

from __future__ import annotations

from aiohttp import web

CONSOLE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The console's Content-Security-Policy."""
API_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
"""Every other answer's (JSON, text, problem documents)."""

HEADERS: dict[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), interest-cohort=()",
}
"""Set on every answer, whatever its path."""


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: runs for every answer, streamed, refused or failed."""
    console = request.path == "/console" or request.path.startswith("/console/")
    response.headers["Content-Security-Policy"] = CONSOLE_POLICY if console else API_POLICY
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if request.path.startswith("/v1/"):
        response.headers["Cache-Control"] = "no-store"  # a tenant's data, behind a token
