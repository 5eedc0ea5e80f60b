"""The CLI's HTTP client for the API (standard library only, synchronous).

Which URL and token the job commands use is decided in :mod:`services.cli.config`
(flag, environment, profile, local stack). :func:`resolve_token` and
:func:`base_url` serve the demo and the benchmarks, which talk to the local
stack they started.

A token goes only where it is meant to (:func:`check_transport`): over https,
or plain http to a loopback address unless ``--insecure-http`` (or
``GRIDLEDGER_INSECURE_HTTP=1``) says the network is trusted. A redirect is never
followed, to the same host or another: the request that carries the token ends
there, and the error names where the API pointed to.
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from services.cli.config import dev_token, local_api_url, no_token_advice
from services.cli.exits import CliError, Exit, for_http_status
from services.settings import Settings


class ApiError(CliError):
    """The API answered with an error status; ``body`` holds its JSON when there was one."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(message, for_http_status(status))
        self.status = status
        self.body = body


def resolve_token(settings: Settings, explicit: str | None) -> str:
    """The token to use: the flag, else GRIDLEDGER_TOKEN, else the local stack's dev token; a
    CliError says how to get one."""
    token = explicit or os.environ.get("GRIDLEDGER_TOKEN") or dev_token(settings)
    if not token:
        raise CliError(no_token_advice(settings), Exit.NOT_AUTHORISED)
    return token


def base_url(settings: Settings, explicit: str | None) -> str:
    """The API to talk to: the flag, else GRIDLEDGER_API_URL, else the local stack's."""
    url = explicit or os.environ.get("GRIDLEDGER_API_URL") or local_api_url(settings)
    return url.rstrip("/")


def insecure_http_from_env() -> bool:
    """``GRIDLEDGER_INSECURE_HTTP=1``: plain http to a non-loopback API is allowed."""
    return os.environ.get("GRIDLEDGER_INSECURE_HTTP", "").lower() in {"1", "true", "yes"}


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: localhost, 127.0.0.0/8 or ::1."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_transport(url: str, insecure_http: bool) -> None:
    """A CliError unless ``url`` may carry a token: https, or http to a loopback host, or
    http anywhere when the user said the network is trusted."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise CliError(
            f"the API URL {url!r} is not an http(s) URL; use e.g. https://gridledger.example.com",
            Exit.USAGE,
        )
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not insecure_http:
        raise CliError(
            f"refusing to send a token over plain http to {parts.hostname}: anyone on the way "
            f"could read it. Use https://{parts.netloc}, or pass --insecure-http (or set "
            "GRIDLEDGER_INSECURE_HTTP=1) if the network to it is trusted",
            Exit.USAGE,
        )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects end the request (urllib would resend the token to wherever they point)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


@dataclass
class ApiClient:
    """A small blocking HTTP client of the API (the CLI runs one request at a time); errors become
    CliErrors with the API's problem text."""

    base: str
    token: str
    timeout: float = 30.0
    token_from: str = ""
    """Where the token came from (flag, variable, profile), named when the API refuses it."""
    insecure_http: bool = False
    """Plain http to a host that is not this machine is allowed (``--insecure-http``, or
    ``GRIDLEDGER_INSECURE_HTTP=1``)."""

    def __post_init__(self) -> None:
        self.insecure_http = self.insecure_http or insecure_http_from_env()

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        extra: dict[str, str] | None = None,
    ) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        headers.update(extra or {})
        if body is not None:
            headers["Content-Type"] = content_type
        check_transport(self.base, self.insecure_http)
        request = urllib.request.Request(
            self.base + path, data=body, method=method, headers=headers
        )
        try:
            return _OPENER.open(request, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                exc.close()
                raise CliError(
                    f"the API at {self.base} answered {exc.code} redirecting to "
                    f"{exc.headers.get('Location') or '(no Location)'}; gridledger never "
                    "follows a redirect with your token. If that address is the API, use it "
                    "as --api (or in the profile)",
                    Exit.ERROR,
                ) from None
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            message = _message(exc.code, payload, raw)
            if exc.code == 401 and self.token_from:
                message += f" (the token came from {self.token_from})"
            raise ApiError(exc.code, message, payload) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CliError(
                f"cannot reach the gridledger API at {self.base}: {exc}. Check the URL "
                "(--api, GRIDLEDGER_API_URL or the profile); on the local stack, start it with "
                "`gridledger api` (and the sink with `gridledger sink`)",
                Exit.API_UNREACHABLE,
            ) from exc

    def get(self, path: str) -> Any:
        """GET ``path`` and decode its JSON body."""
        with self._request("GET", path) as response:
            return json.loads(response.read())

    def post(
        self,
        path: str,
        body: bytes = b"{}",
        content_type: str = "application/json",
        idempotency_key: str | None = None,
    ) -> Any:
        """POST ``body`` to ``path``; an idempotency key makes a retried submit return the first
        job, not a second one."""
        extra = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        with self._request("POST", path, body, content_type, extra=extra) as response:
            return json.loads(response.read())

    def send(self, method: str, path: str, body: bytes | None = None) -> Any:
        """Another method (PUT, DELETE) with an optional JSON body; the reply decoded."""
        with self._request(method, path, body) as response:
            return json.loads(response.read())

    def stream(self, path: str, timeout: float = 3600.0) -> Iterator[dict[str, Any]]:
        """NDJSON lines of a streamed response, as they arrive; a read that waits longer than
        ``timeout`` raises TimeoutError."""
        with self._request("GET", path, timeout=timeout) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)


def _message(status: int, payload: Any, raw: bytes) -> str:
    if isinstance(payload, dict):
        if payload.get("problems"):
            return "; ".join(
                f"{p['field']}: {p['problem']} (fix: {p['fix']})" for p in payload["problems"]
            )
        detail = payload.get("detail") or payload.get("error")
        hint = payload.get("hint")
        return f"{detail}" + (f" — {hint}" if hint else "")
    return f"HTTP {status}: {raw[:200].decode(errors='replace')}"
