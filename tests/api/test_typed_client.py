"""The client distribution's typed HTTP client against the real API (its documents agree with
/openapi.json), run in a thread: it blocks, as a script using it would."""

from __future__ import annotations

import asyncio
import typing

import pytest
import yaml
from gridledger_client.http import DOCUMENTS, ApiError, Client, TransportRefusedError

from services.api.openapi import openapi_document
from services.api.routes import OPERATIONS
from tests.api.conftest import DEV_TOKEN, Api
from tests.api.test_jobs import SPEC_YAML


def test_each_document_names_only_fields_of_its_openapi_schema() -> None:
    schemas = openapi_document(OPERATIONS)["components"]["schemas"]
    for name, document in DOCUMENTS.items():
        fields, documented = set(typing.get_type_hints(document)), set(schemas[name]["properties"])
        assert fields and fields <= documented, (name, fields - documented)


@pytest.mark.integration
async def test_submit_read_list_explain_and_cancel_a_job(api: Api) -> None:
    client = Client(str(api.client.make_url("")), DEV_TOKEN)
    spec = yaml.safe_load(SPEC_YAML)

    def session() -> tuple[dict[str, object], ...]:
        created = client.submit(spec, idempotency_key="typed-client-1")
        again = client.submit(spec, idempotency_key="typed-client-1")
        assert again["job_id"] == created["job_id"], "a retried submit is the same job"
        job = client.job(created["job_id"])
        page = client.jobs(limit=5)
        explained = client.explain(created["job_id"])
        cancelled = client.cancel(created["job_id"])
        return dict(created), dict(job), dict(page), dict(explained), dict(cancelled)

    created, job, page, explained, cancelled = await asyncio.to_thread(session)
    job_id = created["job_id"]
    assert job["job_id"] == job_id and job["status"] in {"submitted", "queued"}
    assert job_id in [row["job_id"] for row in page["jobs"]]  # type: ignore[attr-defined]
    assert explained["job_id"] == job_id and explained["text"]
    assert cancelled == {"job_id": job_id, "cancel_requested": True,
                         "event_id": cancelled["event_id"]}  # fmt: skip

    def refusals() -> tuple[ApiError, ApiError]:
        with pytest.raises(ApiError) as missing:
            client.job("job-000000000000")
        with pytest.raises(ApiError) as invalid:
            client.submit({**spec, "resources": {"gpus": -1}})
        return missing.value, invalid.value

    missing, invalid = await asyncio.to_thread(refusals)
    assert missing.status == 404 and missing.body["error"] == "not_found"
    assert invalid.status == 422 and "resources.gpus" in invalid.message


def test_a_token_never_goes_over_plain_http_to_another_host() -> None:
    with pytest.raises(TransportRefusedError, match="insecure_http=True"):
        Client("http://gridledger.example.test", "t").job("job-1")
