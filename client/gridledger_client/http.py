"""The API's typed HTTP client (standard library only, synchronous).

>>> api = Client("https://gridledger.example.com", token)
>>> created = api.submit({"name": "train", "image": "...", "command": [...]})
>>> api.job(created["job_id"])["status"]
'running'

A token goes only where it is meant to (:func:`transport_problem`): over https, or
plain http to a loopback address unless ``insecure_http=True`` says the network is
trusted. A redirect is never followed, to the same host or another: the request that
carries the token ends there (:class:`RedirectedError`). An error status raises
:class:`ApiError` with the problem text the API sent (``problem+json``: the field and
the rule). The return types are the API's documents (``/openapi.json``) as TypedDicts;
tests/client/test_http_client.py checks that they agree.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.client import HTTPResponse
from typing import Any, TypedDict, cast


class Links(TypedDict, total=False):
    """Where a job's documents are."""

    self: str
    explain: str
    logs: str
    events: str
    accounting: str


class Created(TypedDict, total=False):
    """``POST /v1/jobs``: the job recorded (or, with an idempotency key, the first one)."""

    job_id: str
    status: str
    event_id: str | None
    recorded: bool
    links: Links
    warnings: list[dict[str, Any]]


class JobSummary(TypedDict, total=False):
    """One row of ``GET /v1/jobs``."""

    job_id: str
    name: str
    status: str
    attempt: int
    image: str
    gpus: int
    submitted_at: str | None
    updated_at: str | None
    terminal_at: str | None
    failure_class: str | None
    attribution: str | None
    summary: str | None


class JobPage(TypedDict, total=False):
    """``GET /v1/jobs``: newest first; pass ``next_cursor`` for the next page."""

    jobs: list[JobSummary]
    count: int
    next_cursor: str | None


class FailureInfo(TypedDict, total=False):
    """Why a job (or an attempt) failed, whose side it is on and what to do next."""

    failure_class: str
    attribution: str
    retryable: bool
    summary: str
    advice: str
    evidence: dict[str, Any]
    rule_id: str
    classifier_version: str
    attempt: int


class JobDocument(TypedDict, total=False):
    """``GET /v1/jobs/{job_id}`` (its main fields; the document has more)."""

    job_id: str
    tenant: str
    name: str
    status: str
    spec: dict[str, Any]
    submitted_at: str | None
    updated_at: str | None
    terminal_at: str | None
    attempt: int
    attempts: list[dict[str, Any]]
    failure: FailureInfo | None
    terminal: bool
    accounting: dict[str, Any] | None
    links: Links


class Explanation(TypedDict, total=False):
    """``GET /v1/jobs/{job_id}/explain``: what happened, why, and what to do next."""

    job_id: str
    status: str
    text: str


class CancelAccepted(TypedDict, total=False):
    """``POST /v1/jobs/{job_id}/cancel``."""

    job_id: str
    cancel_requested: bool
    event_id: str


class LogLine(TypedDict, total=False):
    """One NDJSON line of ``GET /v1/jobs/{job_id}/logs``: a chunk, a keepalive or the end."""

    attempt: int | None
    stream: str | None
    seq: int | None
    first_line: int | None
    line_count: int | None
    data: str | None
    truncated: bool | None
    occurred_at: str | None
    keepalive: bool | None
    end: bool | None
    status: str | None


class AccountingDocument(TypedDict, total=False):
    """``GET /v1/jobs/{job_id}/accounting``: held, metered, billable and credited seconds, and
    their money at the price catalog's prices (exact decimal text and integer billionths)."""

    job_id: str
    tenant: str
    status: str
    final: bool
    policy_version: str
    held_seconds: float
    gpu_seconds: float
    metered_gpu_seconds: float
    billable_gpu_seconds: float
    credited_gpu_seconds: float
    reconciled: bool
    currency: str
    billable_cost: str
    credited_cost: str
    billable_cost_nanos: int
    credited_cost_nanos: int
    unpriced_gpu_us: int
    price_versions: list[int]


class NodeList(TypedDict, total=False):
    """``GET /v1/nodes``: the fleet."""

    nodes: list[dict[str, Any]]


DOCUMENTS: dict[str, type] = {
    "Created": Created,
    "JobSummary": JobSummary,
    "JobPage": JobPage,
    "FailureInfo": FailureInfo,
    "JobDocument": JobDocument,
    "Explanation": Explanation,
    "CancelAccepted": CancelAccepted,
    "LogLine": LogLine,
    "AccountingDocument": AccountingDocument,
    "NodeList": NodeList,
    "Links": Links,
}
"""Each TypedDict by the name of the OpenAPI schema it mirrors."""


class ApiError(Exception):
    """The API answered with an error status: ``status``, the problem text, and ``body``
    (its JSON, when there was one)."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body


class RedirectedError(Exception):
    """The API answered a redirect, which is never followed with a token."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(f"answered {status} redirecting to {location or '(no Location)'}")
        self.status = status
        self.location = location


class UnreachableError(ConnectionError):
    """No answer from the API (refused, unresolvable, timed out)."""


class TransportRefusedError(ValueError):
    """The URL may not carry a token (the message says why)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: localhost, 127.0.0.0/8 or ::1."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def transport_problem(url: str, insecure_http: bool) -> str | None:
    """Why ``url`` may not carry a token, or None: it must be https, or http to a loopback
    host, or http anywhere when the network to it is trusted (``insecure_http``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return f"the API URL {url!r} is not an http(s) URL; use e.g. https://gridledger.example.com"
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not insecure_http:
        return (
            f"refusing to send a token over plain http to {parts.hostname}: anyone on the way "
            f"could read it. Use https://{parts.netloc}, or pass insecure_http=True if the "
            "network to it is trusted"
        )
    return None


def problem_message(status: int, payload: Any, raw: bytes) -> str:
    """One line of an error answer: each problem's field, rule and fix, else its detail."""
    if isinstance(payload, dict):
        if payload.get("problems"):
            return "; ".join(
                f"{p['field']}: {p['problem']} (fix: {p['fix']})" for p in payload["problems"]
            )
        detail = payload.get("detail") or payload.get("error")
        hint = payload.get("hint")
        return f"{detail}" + (f" — {hint}" if hint else "")
    return f"HTTP {status}: {raw[:200].decode(errors='replace')}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects end the request (urllib would resend the token to wherever they point)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


@dataclass
class Client:
    """A blocking client of the API, one request at a time; see the module's doc."""

    base: str
    token: str
    timeout: float = 30.0
    insecure_http: bool = False
    """Plain http to a host that is not this machine is allowed (the network is trusted)."""

    def __post_init__(self) -> None:
        self.base = self.base.rstrip("/")

    def open(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HTTPResponse:
        """Send one request and return the open response (close it); raises
        :class:`TransportRefusedError`, :class:`RedirectedError`, :class:`ApiError` or
        :class:`UnreachableError`."""
        problem = transport_problem(self.base, self.insecure_http)
        if problem:
            raise TransportRefusedError(problem)
        sent = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        sent.update(headers or {})
        if body is not None:
            sent["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=body, method=method, headers=sent)
        try:
            return cast(HTTPResponse, _OPENER.open(request, timeout=timeout or self.timeout))
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                exc.close()
                raise RedirectedError(exc.code, exc.headers.get("Location") or "") from None
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            raise ApiError(exc.code, problem_message(exc.code, payload, raw), payload) from None
        except (urllib.error.URLError, OSError) as exc:
            raise UnreachableError(
                f"cannot reach the gridledger API at {self.base}: {exc}"
            ) from exc

    def get(self, path: str) -> Any:
        """GET ``path`` and decode its JSON body."""
        with self.open("GET", path) as response:
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
        with self.open("POST", path, body, content_type, headers=extra) as response:
            return json.loads(response.read())

    def send(self, method: str, path: str, body: bytes | None = None) -> Any:
        """Another method (PUT, DELETE) with an optional JSON body; the reply decoded."""
        with self.open(method, path, body) as response:
            return json.loads(response.read())

    def stream(self, path: str, timeout: float = 3600.0) -> Iterator[dict[str, Any]]:
        """NDJSON lines of a streamed response, as they arrive; a read that waits longer than
        ``timeout`` raises TimeoutError."""
        with self.open("GET", path, timeout=timeout) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)

    # ------------------------------------------------------------------ typed calls

    def submit(self, spec: Mapping[str, Any], idempotency_key: str | None = None) -> Created:
        """Submit a job spec (the JobSpec document); a 422 names each field and rule."""
        return cast(
            Created,
            self.post("/v1/jobs", json.dumps(spec).encode(), idempotency_key=idempotency_key),
        )

    def jobs(
        self, limit: int = 50, cursor: str | None = None, status: str | None = None
    ) -> JobPage:
        """A page of the tenant's jobs, newest first."""
        query = {"limit": str(limit), "cursor": cursor, "status": status}
        return cast(JobPage, self.get("/v1/jobs?" + _query(query)))

    def job(self, job_id: str) -> JobDocument:
        """One job's document: state, attempts, failure, accounting."""
        return cast(JobDocument, self.get(f"/v1/jobs/{_segment(job_id)}"))

    def explain(self, job_id: str) -> Explanation:
        """What happened to a job, why, whose side it is on, and what to do next."""
        return cast(Explanation, self.get(f"/v1/jobs/{_segment(job_id)}/explain"))

    def accounting(self, job_id: str) -> AccountingDocument:
        """A job's accounting record."""
        return cast(AccountingDocument, self.get(f"/v1/jobs/{_segment(job_id)}/accounting"))

    def cancel(self, job_id: str) -> CancelAccepted:
        """Ask for a job to be cancelled (a running one gets its stop grace first)."""
        return cast(CancelAccepted, self.post(f"/v1/jobs/{_segment(job_id)}/cancel"))

    def logs(self, job_id: str, follow: bool = False, timeout: float = 3600.0) -> Iterator[LogLine]:
        """A job's log chunks as NDJSON; with ``follow`` until the job ends (a line with
        ``end``)."""
        query = _query({"format": "ndjson", "follow": "true" if follow else None})
        path = f"/v1/jobs/{_segment(job_id)}/logs?{query}"
        return cast(Iterator[LogLine], self.stream(path, timeout))

    def nodes(self) -> NodeList:
        """The fleet the tenant may see."""
        return cast(NodeList, self.get("/v1/nodes"))


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _query(params: Mapping[str, str | None]) -> str:
    return urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
