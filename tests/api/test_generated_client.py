"""A client generated from /openapi.json by openapi-python-client is typed and talks to the API."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from services.api.openapi import OPENAPI
from tests.api.conftest import DEV_TOKEN, Api
from tests.api.test_jobs import submit

pytestmark = pytest.mark.integration
GENERATOR = Path(sys.executable).parent / "openapi-python-client"


@pytest.fixture
def generated(api: Api, tmp_path: Path) -> Iterator[ModuleType]:
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(api.app[OPENAPI]))
    config = tmp_path / "config.json"
    # YAML bodies carry the same JobSpec; the generated client sends JSON. The console's
    # icon (/favicon.ico) is bytes to a generated client.
    overrides = {"application/yaml": "application/json", "image/x-icon": "application/octet-stream"}
    config.write_text(json.dumps({"content_type_overrides": overrides}))
    done = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(document), "--meta", "none",
         "--output-path", str(tmp_path / "generated_client"), "--config", str(config),
         "--fail-on-warning"],
        capture_output=True, text=True, timeout=300,
        # its post-generation hook formats with ruff, which lives next to this interpreter
        env={**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("generated_client")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("generated_client")]:
            del sys.modules[name]


async def test_the_generated_client_pages_jobs_and_reads_one_as_models(
    api: Api, generated: ModuleType
) -> None:
    first, second = await submit(api), await submit(api)
    list_jobs = importlib.import_module("generated_client.api.jobs.list_jobs")
    get_job = importlib.import_module("generated_client.api.jobs.get_job")
    models = importlib.import_module("generated_client.models")
    client = generated.AuthenticatedClient(base_url=str(api.client.make_url("")), token=DEV_TOKEN)
    async with client as c:
        page = await list_jobs.asyncio(client=c, limit=1)
        assert isinstance(page, models.JobPage)
        assert [j.job_id for j in page.jobs] == [second] and isinstance(page.next_cursor, str)
        rest = await list_jobs.asyncio(client=c, limit=1, cursor=page.next_cursor)
        assert [j.job_id for j in rest.jobs] == [first]
        job = await get_job.asyncio(job_id=first, client=c)
        assert isinstance(job, models.JobDocument)
        assert job.job_id == first and job.spec.resources.memory_gb == 8
        missing = await get_job.asyncio(job_id="job-000000000000", client=c)
        assert isinstance(missing, models.ErrorBody) and missing.error == "not_found"
