"""The ops HTTP server every service runs: ``/healthz``, ``/readyz``, ``/metrics``.

- ``/healthz`` answers 200 while the process's event loop runs (liveness: a
  supervisor or systemd restarts a process that stops answering it).
- ``/readyz`` runs the service's checks now and answers 200 when every critical
  one passed, 503 otherwise, with a JSON body listing each check (name, ok,
  critical, detail); a failed non-critical check is listed under ``degraded``.
- ``/metrics`` runs the service's scrape hooks (gauges read from Postgres, the
  spool, the consumers' lag) and answers the registry in Prometheus text.

It listens on ``settings.ops_host:settings.ops_port``; port 0 means off (a
service started by hand without ``GRIDLEDGER_OPS_PORT`` opens no port). The API
also mounts the same three routes on its own port (:meth:`OpsEndpoints.add_routes`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.ops import metrics
from services.ops.checks import Check, close_checks, run_checks

log = logging.getLogger(__name__)

ScrapeHook = Callable[[], Awaitable[None]]

OPS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Paths that need no API token (the API's auth middleware lets them through)."""


class OpsEndpoints:
    """The three handlers over one service's checks and scrape hooks."""

    def __init__(
        self,
        service: str,
        checks: Sequence[Check] = (),
        scrape_hooks: Sequence[ScrapeHook] = (),
    ) -> None:
        self.service = service
        self.checks = list(checks)
        self.scrape_hooks = list(scrape_hooks)
        self.started_at = time.time()

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Run the checks; ready when every critical one passes."""
        results = await run_checks(self.checks)
        ready = all(r.ok for r in results if r.critical)
        return ready, {
            "service": self.service,
            "pid": os.getpid(),
            "ready": ready,
            "degraded": [r.name for r in results if not r.ok and not r.critical],
            "checks": [r.to_json() for r in results],
        }

    async def healthz(self, request: web.Request) -> web.Response:
        """/healthz: the process runs and answers (liveness, no checks)."""
        return web.json_response(
            {
                "service": self.service,
                "pid": os.getpid(),
                "alive": True,
                "uptime_s": round(time.time() - self.started_at, 1),
            }
        )

    async def readyz(self, request: web.Request) -> web.Response:
        """/readyz: 200 when ready, 503 when not, with every check's result either way."""
        ready, body = await self.readiness()
        return web.json_response(body, status=200 if ready else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        """/metrics: the scrape hooks run first, so gauges like lag are current; a failing hook
        is logged, the page still served."""
        for hook in self.scrape_hooks:
            try:
                await hook()
            except Exception as exc:  # noqa: BLE001 - a scrape still answers what it has
                log.warning("%s: metrics hook %s failed: %s", self.service, hook, exc)
        body = generate_latest(metrics.REGISTRY)
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    def add_routes(self, app: web.Application) -> None:
        """Mount /healthz, /readyz and /metrics on ``app`` (the API serves them on its own port)."""
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)


class OpsServer:
    """Serve :class:`OpsEndpoints` on their own port; ``port=0`` disables it."""

    def __init__(self, endpoints: OpsEndpoints, host: str, port: int) -> None:
        self.endpoints = endpoints
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def enabled(self) -> bool:
        """Whether an ops port was given (0 turns the server off)."""
        return self.port > 0

    async def start(self) -> OpsServer:
        """Serve on the ops port, unless it is off."""
        if not self.enabled:
            return self
        app = web.Application()
        self.endpoints.add_routes(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self._runner = runner
        log.info(
            "%s ops endpoints on http://%s:%d (/healthz /readyz /metrics)",
            self.endpoints.service,
            self.host,
            self.port,
        )
        return self

    async def stop(self) -> None:
        """Stop serving and close the checks' connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await close_checks(self.endpoints.checks)

    async def __aenter__(self) -> OpsServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def ops_server(settings: Any, endpoints: OpsEndpoints) -> OpsServer:
    """The service's ops server on ``settings.ops_host:ops_port`` (off when the port is 0)."""
    return OpsServer(endpoints, settings.ops_host, settings.ops_port)


def stop_on_signals() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets: what a service runs until (a clean stop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve_until_signalled(
    settings: Any, service: Any, endpoints: Callable[[Any, Any], OpsEndpoints]
) -> None:
    """Run a service (``start``, ``serve_until(stop)``, ``stop``) with its ops server
    (``endpoints(settings, service)``) until SIGINT or SIGTERM."""
    stop = stop_on_signals()
    await service.start()
    ops = await ops_server(settings, endpoints(settings, service)).start()
    try:
        await service.serve_until(stop)
    finally:
        await ops.stop()
        await service.stop()


@web.middleware
async def request_metrics(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Observe ``gridledger_api_request_seconds`` per route template, method and status.

    The route is the template (``/v1/jobs/{job_id}``), never the concrete path, so the
    number of series stays bounded whatever ids clients send.
    """
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        status = exc.status
        raise
    else:
        status = response.status
        return response
    finally:
        route = request.match_info.route.resource
        template = route.canonical if route is not None else "(unmatched)"
        metrics.API_REQUEST_SECONDS.labels(
            method=request.method, route=template, status=str(status)
        ).observe(time.perf_counter() - started)
