"""Tenants' secrets through the API: set, list, rm per tenant; the agent's resolve call.

Real Postgres (the fixture's own schema), the real API app and sink, the real ledger.
"""

from __future__ import annotations

from typing import Any

import pytest

from schemas.events import AttemptScheduled, ComputeReleased, JobSubmitted
from schemas.spec import JobSpec
from services.secretstore import SecretsKey, load_key
from tests.api.conftest import OTHER_TOKEN, Api
from tests.sink.scenario import at

pytestmark = pytest.mark.integration

VALUE = "hf_s3cr3t-value-never-shown-9f2c"


def key_of(api: Api) -> SecretsKey:
    return load_key(api.settings)


async def put(api: Api, name: str, value: str, token: str | None = None) -> Any:
    return await api.client.put(
        f"/v1/secrets/{name}", json={"value": value}, headers=api.auth(token or "tok-dev")
    )


async def test_a_tenant_sets_lists_and_removes_its_own_secrets_only(api: Api) -> None:
    first = await put(api, "hf-token", VALUE)
    assert first.status == 201, await first.text()
    again = await put(api, "hf-token", VALUE + "2")
    assert again.status == 200 and (await again.json())["bytes"] == len(VALUE) + 1

    listed = await (await api.client.get("/v1/secrets", headers=api.auth())).text()
    assert '"hf-token"' in listed and VALUE not in listed
    other = await (await api.client.get("/v1/secrets", headers=api.auth(OTHER_TOKEN))).json()
    assert other == {"secrets": [], "count": 0}
    gone = await api.client.delete("/v1/secrets/hf-token", headers=api.auth(OTHER_TOKEN))
    assert gone.status == 404 and gone.content_type == "application/problem+json"

    sealed = await api.pool.fetchval("SELECT sealed FROM tenant_secrets WHERE name = 'hf-token'")
    assert VALUE.encode() not in bytes(sealed)
    assert key_of(api).open("dev", "hf-token", bytes(sealed)) == (VALUE + "2").encode()

    removed = await api.client.delete("/v1/secrets/hf-token", headers=api.auth())
    assert (await removed.json()) == {"name": "hf-token", "removed": True}
    after = await (await api.client.get("/v1/secrets", headers=api.auth())).json()
    assert after["count"] == 0


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("-bad", "x", "name"),
        ("ok", "", "value"),
        ("ok", "a\0b", "value"),
        ("ok", "x" * (64 * 1024 + 1), "value"),
    ],
)
async def test_a_refused_secret_names_the_field(
    api: Api, name: str, value: str, field: str
) -> None:
    response = await put(api, name, value)
    assert response.status == 422 and response.content_type == "application/problem+json"
    assert (await response.json())["problems"][0]["field"] == field


async def schedule(api: Api, job_id: str, node: str, tenant: str = "dev") -> None:
    spec = JobSpec(image="gridledger/busybox:latest", secrets={"HF_TOKEN": "hf-token", "DB": "db"})
    await api.ledger.append_many(
        [
            JobSubmitted(
                job_id=job_id, occurred_at=at(0), producer="api/t", tenant=tenant, spec=spec
            ),
            AttemptScheduled(
                job_id=job_id,
                attempt=1,
                occurred_at=at(1),
                producer="scheduler/t",
                node_id=node,
                gpu_count=1,
                dispatch_deadline=at(61),
                spec=spec,
                tenant=tenant,
            ),
        ]
    )
    await api.sink.catch_up()


async def resolve(api: Api, job_id: str, node: str, token: str) -> Any:
    return await api.client.post(
        "/v1/agent/secrets",
        json={"job_id": job_id, "attempt": 1},
        headers={"Authorization": f"Bearer {token}", "X-Gridledger-Node": node},
    )


async def test_an_agent_gets_the_secrets_of_its_own_attempt_from_the_job_s_tenant(api: Api) -> None:
    key = key_of(api)
    await put(api, "hf-token", VALUE)
    await put(api, "db", "other-tenant-db", token=OTHER_TOKEN)  # never the dev job's
    await schedule(api, "job-sec1", "node-a")

    answer = await resolve(api, "job-sec1", "node-a", key.agent_token("node-a"))
    assert answer.status == 200, await answer.text()
    assert await answer.json() == {
        "job_id": "job-sec1",
        "attempt": 1,
        "values": {"HF_TOKEN": VALUE},
        "missing": [{"variable": "DB", "secret": "db"}],
    }

    elsewhere = await resolve(api, "job-sec1", "node-b", key.agent_token("node-b"))
    assert elsewhere.status == 403
    forged = await resolve(api, "job-sec1", "node-a", key.agent_token("node-b"))
    assert forged.status == 401 and forged.content_type == "application/problem+json"
    tenant = await resolve(api, "job-sec1", "node-a", "tok-dev")
    assert tenant.status == 401
    # Once the attempt released its compute, no container of it may start: no values.
    await api.ledger.append(
        ComputeReleased(
            job_id="job-sec1",
            attempt=1,
            occurred_at=at(9),
            producer="agent/node-a",
            node_id="node-a",
            reason="exited",
        )
    )
    await api.sink.catch_up()
    over = await resolve(api, "job-sec1", "node-a", key.agent_token("node-a"))
    assert over.status == 410 and VALUE not in await over.text()
    # ... and an agent token is no tenant token.
    listing = await api.client.get(
        "/v1/secrets", headers={"Authorization": f"Bearer {key.agent_token('node-a')}"}
    )
    assert listing.status == 401


async def test_a_tenant_past_its_secret_limit_may_replace_but_not_add(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("services.secretstore.MAX_SECRETS_PER_TENANT", 1)
    assert (await put(api, "one", "v1")).status == 201
    refused = await put(api, "two", "v2")
    assert refused.status == 409 and (await refused.json())["problems"][0]["field"] == "name"
    assert (await put(api, "one", "v1b")).status == 200
    assert (await put(api, "two", "v2", token=OTHER_TOKEN)).status == 201  # per tenant
