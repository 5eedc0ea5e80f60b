"""A job's stored artifacts through the API and the CLI: listed, signed, fetched, tenant-checked.

Objects are put by the agent's own S3 store into the session's real SeaweedFS;
the facts that record them go through the ledger and the in-process sink.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from schemas.events import CheckpointStored, Event, OutputStored
from services.agent.artifacts import S3Store, StoredArtifact
from services.api.app import build_app
from services.api.artifacts import Artifact, Signer
from services.cli.exits import Exit
from services.cli.main import main
from tests.api.conftest import DEV_TOKEN, OTHER_TOKEN, Api
from tests.objectstore import PrivateStore
from tests.sink.scenario import at, run_facts

pytestmark = pytest.mark.integration


def _put(api: Api, tmp_path: Path, tenant: str, job: str, attempt: int, path: str, data: bytes):
    return S3Store(api.settings).put(tenant, job, attempt, path, io.BytesIO(data))


def _stored(job: str, attempt: int, path: str, stored: StoredArtifact, t: float) -> Event:
    common = {"job_id": job, "attempt": attempt, "occurred_at": at(t), "producer": "agent/a"}
    if path.startswith("ckpt/"):
        name = path.removeprefix("ckpt/")
        return CheckpointStored(
            **common, name=name, step=2, uri=stored.uri, sha256=stored.sha256, bytes=stored.bytes
        )
    return OutputStored(
        **common, path=path, uri=stored.uri, sha256=stored.sha256, bytes=stored.bytes
    )


async def _job_with_artifacts(api: Api, tmp_path: Path, job: str) -> dict[str, StoredArtifact]:
    stored = {
        "ckpt/step_2.pt": _put(api, tmp_path, "dev", job, 1, "ckpt/step_2.pt", b"checkpoint 2"),
        "model.pt": _put(api, tmp_path, "dev", job, 1, "model.pt", b"the weights"),
    }
    facts = run_facts(job, tenant="dev").job_events
    # The artifacts are stored before the release (the last facts are the decision).
    cut = next(i for i, e in enumerate(facts) if e.type == "ComputeReleased")
    extra = [_stored(job, 1, p, s, 20 + i) for i, (p, s) in enumerate(stored.items())]
    await api.ledger.append_many([*facts[:cut], *extra, *facts[cut:]])
    await api.sink.catch_up()
    return stored


async def _get(api: Api, path: str, token: str = DEV_TOKEN):
    response = await api.client.get(path, headers=api.auth(token))
    return response.status, await response.json()


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return bytes(reply.read())


async def test_the_list_shows_what_the_history_stored_and_a_url_fetches_it(
    api: Api, tmp_path: Path
) -> None:
    job = "job-art000000001"
    stored = await _job_with_artifacts(api, tmp_path, job)

    status, listing = await _get(api, f"/v1/jobs/{job}/artifacts")
    assert status == 200 and listing["retention_days"] == 30
    rows = {(a["kind"], a["path"], a["attempt"]): a for a in listing["artifacts"]}
    assert set(rows) == {("checkpoint", "ckpt/step_2.pt", 1), ("output", "model.pt", 1)}
    model = rows[("output", "model.pt", 1)]
    assert model["sha256"] == hashlib.sha256(b"the weights").hexdigest()
    assert model["bytes"] == len(b"the weights")
    kept = datetime.fromisoformat(model["expires_at"]) - datetime.fromisoformat(model["stored_at"])
    assert kept == timedelta(days=30)

    status, signed = await _get(api, f"/v1/jobs/{job}/artifacts/url?path=model.pt")
    assert status == 200 and signed["sha256"] == stored["model.pt"].sha256
    assert signed["url"].startswith(f"http://127.0.0.1:{api.settings.s3_port}/gridledger/")
    assert "X-Amz-Expires=300" in signed["url"]
    assert await asyncio.to_thread(_download, signed["url"]) == b"the weights"

    status, signed = await _get(api, f"/v1/jobs/{job}/artifacts/url?path=ckpt/step_2.pt&attempt=1")
    assert status == 200
    assert await asyncio.to_thread(_download, signed["url"]) == b"checkpoint 2"


async def test_another_tenant_sees_no_artifacts_and_gets_no_url(api: Api, tmp_path: Path) -> None:
    job = "job-art000000002"
    await _job_with_artifacts(api, tmp_path, job)
    for path in (f"/v1/jobs/{job}/artifacts", f"/v1/jobs/{job}/artifacts/url?path=model.pt"):
        status, body = await _get(api, path, OTHER_TOKEN)
        assert status == 404 and body["error"] == "not_found"

    status, body = await _get(api, f"/v1/jobs/{job}/artifacts/url?path=nope.pt")
    assert status == 404 and "stored no nope.pt" in body["detail"]
    status, body = await _get(api, f"/v1/jobs/{job}/artifacts/url?path=model.pt&attempt=x")
    assert status == 422 and body["problems"][0]["field"] == "attempt"


async def test_a_history_naming_another_tenants_object_never_signs_it(
    api: Api, tmp_path: Path
) -> None:
    job = "job-art000000003"
    theirs = _put(api, tmp_path, "other", "their-job", 1, "secret.pt", b"not yours")
    facts = run_facts(job, tenant="dev").job_events
    await api.ledger.append_many([*facts, _stored(job, 1, "secret.pt", theirs, 40)])
    await api.sink.catch_up()
    status, body = await _get(api, f"/v1/jobs/{job}/artifacts/url?path=secret.pt")
    assert status == 404


async def test_a_signed_url_stops_working_when_it_expires(
    api: Api, tmp_path: Path, object_store: PrivateStore
) -> None:
    stored = _put(api, tmp_path, "dev", "job-art000000004", 1, "model.pt", b"short-lived")
    signer = Signer(api.settings.model_copy(update={"s3_presign_ttl_s": 1}))
    artifact = Artifact("output", "model.pt", 1, stored.uri, stored.sha256, stored.bytes, at(0))
    url = signer.sign("dev", artifact)["url"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:  # valid for one second; then the store itself refuses it
        try:
            await asyncio.to_thread(_download, url)
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
            break
        assert loop.time() < deadline, "the URL was still accepted 30 s after it expired"
        await asyncio.sleep(0.5)


async def test_outputs_and_download_from_the_cli(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = "job-art000000005"
    await _job_with_artifacts(api, tmp_path, job)
    monkeypatch.setenv("GRIDLEDGER_API_URL", str(api.client.make_url("")).rstrip("/"))
    monkeypatch.setenv("GRIDLEDGER_TOKEN", DEV_TOKEN)

    async def gridledger(*args: str) -> int:
        return await asyncio.to_thread(main, list(args))

    assert await gridledger("outputs", job) == 0
    out = capsys.readouterr().out
    assert "model.pt" in out and "ckpt/step_2.pt" in out and "kept 30 days" in out
    assert await gridledger("outputs", job, "-o", "json") == 0
    assert len(json.loads(capsys.readouterr().out)["artifacts"]) == 2

    target = tmp_path / "results"
    assert await gridledger("download", job, "-d", str(target)) == 0
    assert (target / "model.pt").read_bytes() == b"the weights"
    assert not (target / "ckpt").exists(), "checkpoints only with --checkpoints or a PATH"
    assert "sha256 verified" in capsys.readouterr().out

    assert await gridledger("download", job, "ckpt/step_2.pt", "-d", str(target)) == 0
    assert (target / "ckpt" / "step_2.pt").read_bytes() == b"checkpoint 2"

    assert await gridledger("download", job, "nope.pt", "-d", str(target)) == Exit.NOT_FOUND
    assert f"job {job} stored no nope.pt" in capsys.readouterr().err

    monkeypatch.setenv("GRIDLEDGER_TOKEN", OTHER_TOKEN)
    assert await gridledger("download", job, "-d", str(tmp_path / "theirs")) != 0
    assert not (tmp_path / "theirs").exists()


async def test_no_reader_credential_is_a_503_naming_the_file(
    api: Api, tmp_path: Path, object_store: PrivateStore
) -> None:
    job = "job-art000000006"
    await _job_with_artifacts(api, tmp_path, job)
    creds = object_store.credentials
    # The API's credentials file loses dev's reader: it can list, not sign.
    without = tmp_path / "no-reader.json"
    tenants = {**creds.tenants, "dev": creds.tenants["dev"].model_copy(update={"reader": None})}
    without.write_text(type(creds)(tenants=tenants).model_dump_json(exclude_none=True))
    settings = api.settings.model_copy(update={"s3_credentials_file": without})
    async with TestClient(TestServer(build_app(settings, api.ledger, api.pool))) as client:
        listed = await client.get(f"/v1/jobs/{job}/artifacts", headers=api.auth())
        assert listed.status == 200 and len((await listed.json())["artifacts"]) == 2
        response = await client.get(
            f"/v1/jobs/{job}/artifacts/url?path=model.pt", headers=api.auth()
        )
        assert response.status == 503
        assert response.headers["Content-Type"].startswith("application/problem+json")
        body = await response.json()
    assert body["error"] == "object_store_unavailable"
    assert f"{without} has no 'reader' S3 credential for tenant 'dev'" in body["detail"]
