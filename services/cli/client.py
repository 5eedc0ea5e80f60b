"""The CLI's HTTP client for the API (standard library only, synchronous).

Token: ``--token``, else ``GRIDLEDGER_TOKEN``, else the ``dev`` tenant's token
in the dev tokens file that ``gridledger dev up`` writes.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from schemas.errors import GridledgerError
from services.settings import Settings


class ApiError(GridledgerError):
    """The API answered with an error status; ``body`` holds its JSON when there was one."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def resolve_token(settings: Settings, explicit: str | None) -> str:
    if explicit:
        return explicit
    if os.environ.get("GRIDLEDGER_TOKEN"):
        return os.environ["GRIDLEDGER_TOKEN"]
    path = settings.tokens_path
    try:
        tokens = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GridledgerError(
            f"no API token: pass --token, set GRIDLEDGER_TOKEN, or start the dev stack "
            f"(`gridledger dev up` writes {path}) ({exc})"
        ) from exc
    for token, tenant in tokens.items():
        if tenant == "dev":
            return str(token)
    raise GridledgerError(f"{path} has no token for tenant 'dev'; pass --token")


def base_url(settings: Settings, explicit: str | None) -> str:
    url = explicit or os.environ.get("GRIDLEDGER_API_URL") or settings.api_url
    return (url or f"http://{settings.api_host}:{settings.api_port}").rstrip("/")


@dataclass
class ApiClient:
    base: str
    token: str
    timeout: float = 30.0

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
        request = urllib.request.Request(
            self.base + path, data=body, method=method, headers=headers
        )
        try:
            return urllib.request.urlopen(request, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            raise ApiError(exc.code, _message(exc.code, payload, raw), payload) from None
        except (urllib.error.URLError, OSError) as exc:
            raise GridledgerError(
                f"cannot reach the gridledger API at {self.base}: {exc}. "
                "Start it with `gridledger api` (and the sink with `gridledger sink`)"
            ) from exc

    def get(self, path: str) -> Any:
        with self._request("GET", path) as response:
            return json.loads(response.read())

    def post(
        self,
        path: str,
        body: bytes = b"{}",
        content_type: str = "application/json",
        idempotency_key: str | None = None,
    ) -> Any:
        extra = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        with self._request("POST", path, body, content_type, extra=extra) as response:
            return json.loads(response.read())

    def stream(self, path: str) -> Iterator[dict[str, Any]]:
        """NDJSON lines of a streamed response, as they arrive."""
        with self._request("GET", path, timeout=3600) as response:
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
