"""The CLI's HTTP client for the API: ``gridledger_client.http.Client`` with CLI errors.

Which URL and token the job commands use is decided in :mod:`services.cli.config`
(flag, environment, profile, local stack). :func:`resolve_token` and
:func:`base_url` serve the demo and the benchmarks, which talk to the local
stack they started.

A token goes only where it is meant to (:func:`check_transport`): over https,
or plain http to a loopback address unless ``--insecure-http`` (or
``GRIDLEDGER_INSECURE_HTTP=1``) says the network is trusted. A redirect is never
followed (the client's rule): the error names where the API pointed to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from http.client import HTTPResponse
from typing import Any

from gridledger_client import http

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


def check_transport(url: str, insecure_http: bool) -> None:
    """A CliError unless ``url`` may carry a token (:func:`http.transport_problem`)."""
    problem = http.transport_problem(url, insecure_http)
    if problem is None:
        return
    option = "--insecure-http (or set GRIDLEDGER_INSECURE_HTTP=1)"
    raise CliError(problem.replace("insecure_http=True", option), Exit.USAGE)


@dataclass
class ApiClient(http.Client):
    """The CLI's client of the API (``gridledger_client.http.Client``): its errors become
    CliErrors with the API's problem text and what to do about them."""

    token_from: str = ""
    """Where the token came from (flag, variable, profile), named when the API refuses it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.insecure_http = self.insecure_http or insecure_http_from_env()

    def open(self, *args: Any, **kwargs: Any) -> HTTPResponse:
        """:meth:`http.Client.open`, its errors as CliErrors with the CLI's advice."""
        check_transport(self.base, self.insecure_http)
        try:
            return super().open(*args, **kwargs)
        except http.RedirectedError as exc:
            raise CliError(
                f"the API at {self.base} answered {exc.status} redirecting to "
                f"{exc.location or '(no Location)'}; gridledger never "
                "follows a redirect with your token. If that address is the API, use it "
                "as --api (or in the profile)",
                Exit.ERROR,
            ) from None
        except http.ApiError as exc:
            message = exc.message
            if exc.status == 401 and self.token_from:
                message += f" (the token came from {self.token_from})"
            raise ApiError(exc.status, message, exc.body) from None
        except http.UnreachableError as exc:
            raise CliError(
                f"{exc}. Check the URL "
                "(--api, GRIDLEDGER_API_URL or the profile); on the local stack, start it with "
                "`gridledger api` (and the sink with `gridledger sink`)",
                Exit.API_UNREACHABLE,
            ) from exc
