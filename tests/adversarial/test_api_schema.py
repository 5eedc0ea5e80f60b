"""(a) of issue 21: schemathesis against the live API, driven by its own OpenAPI document.

Every operation of ``/openapi.json`` is called with generated requests (valid and
invalid bodies, queries and path parameters) as the attacker tenant. What must hold
for every answer: no 5xx; every 4xx is ``application/problem+json``; the status,
content type, headers and body match what the document declares. The CI subset
tries :data:`QUICK_EXAMPLES` requests per operation, the full set
(``GRIDLEDGER_ADVERSARIAL_FULL=1``) :data:`FULL_EXAMPLES`. Afterwards every check of
:mod:`tests.adversarial.after` holds.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks
from schemathesis.specs.openapi import checks as openapi_checks

from tests.adversarial.after import check_all
from tests.adversarial.stack import Hostile, full

pytestmark = pytest.mark.integration

QUICK_EXAMPLES = 3
FULL_EXAMPLES = 200

PROBLEM_JSON = "application/problem+json"


@schemathesis.check
def client_errors_are_problem_json(ctx: Any, response: Any, case: Any) -> bool | None:
    """A refusal tells the user what broke which rule, always in one format (RFC 9457)."""
    if 400 <= response.status_code < 500:
        media = next((v for k, v in response.headers.items() if k.lower() == "content-type"), "")
        media = media[0] if isinstance(media, list) else media
        if not str(media).startswith(PROBLEM_JSON):
            raise AssertionError(f"a {response.status_code} answered {media!r}, not {PROBLEM_JSON}")
        body = response.json()
        if not (isinstance(body, dict) and body.get("title") and body.get("detail")):
            raise AssertionError(f"a {response.status_code} problem without title/detail: {body}")
    return None


CHECKS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
    client_errors_are_problem_json,
]


def fuzz(operation: Any, mode: GenerationMode, base: str, token: str) -> list[str]:
    """Run one operation's generated requests of ``mode``; the failures, one line each."""
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {token}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=FULL_EXAMPLES if full() else QUICK_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=not full(),
        database=None,
        phases=[Phase.generate],
    )
    def run(case: Any) -> None:
        try:
            case.call_and_validate(base_url=base, headers=headers, checks=CHECKS, timeout=60)
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collected, reported
            lines = str(exc).strip().splitlines()
            # What broke, and the request that shows it (schemathesis's curl line).
            shown = lines[:6] + [line.strip() for line in lines if "curl " in line][:1]
            failures.append(f"{operation.label} ({mode.value}): {' / '.join(shown)}")

    try:
        run()
    except Unsatisfiable:
        # Nothing to make invalid: an operation without parameters or body.
        assert mode is GenerationMode.NEGATIVE, operation.label
    return failures


def test_every_answer_of_the_api_keeps_its_contract(hostile: Hostile) -> None:
    base = f"http://{hostile.settings.api_host}:{hostile.settings.api_port}"
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in GenerationMode:
            failures.extend(fuzz(operation, mode, base, hostile.attacker.token))
    assert operations >= 15
    assert not failures, f"{len(failures)} answers broke the contract:\n" + "\n".join(
        sorted(set(failures))
    )


def test_after_the_fuzzing_every_after_check_holds(hostile: Hostile) -> None:
    check_all(hostile)
