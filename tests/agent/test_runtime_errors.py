"""Mapping docker's errors to facts (the messages are the ones this daemon really sends)."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from services.agent.runtime import parse_docker_time, pull_failure_reason, start_error_kind

MISSING_ENTRYPOINT = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    'container process: exec: "/nonexistent": stat /nonexistent: no such file or directory: unknown'
)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (MISSING_ENTRYPOINT, "entrypoint_not_found"),
        ('exec: "nope": executable file not found in $PATH: unknown', "entrypoint_not_found"),
        ('exec: "/etc/passwd": permission denied: unknown', "entrypoint_not_executable"),
        ("invalid reference format", "invalid_config"),
        ("something else broke", "daemon_error"),
    ],
)
def test_start_error_kind(message: str, kind: str):
    assert start_error_kind(message) == kind


def _api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("pull", response=response, explanation=explanation)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (_api_error(404, "manifest unknown: manifest unknown"), "not_found"),
        (_api_error(500, "pull access denied for nope, repository does not exist"), "not_found"),
        (
            _api_error(
                500,
                'Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: '
                "connection refused",
            ),
            "registry_unreachable",
        ),
        (_api_error(500, "net/http: TLS handshake timeout"), "registry_unreachable"),
        (requests.exceptions.ReadTimeout("read timed out"), "registry_unreachable"),
    ],
)
def test_pull_failure_reason(error: Exception, reason: str):
    assert pull_failure_reason(error) == reason


def test_parse_docker_time():
    parsed = parse_docker_time("2026-11-30T05:40:15.284584176Z")
    assert parsed is not None and parsed.microsecond == 284584 and parsed.utcoffset().seconds == 0
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
