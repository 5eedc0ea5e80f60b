"""``pip install ./client`` into a fresh venv gives a working subscriber, and nothing of the
server: the example service, run from that venv alone, prints what a job's events ask for.

The venv installs offline from the wheelhouse that ``infra/setup.sh`` fills
(``wheels/`` of the cache folder, :func:`infra.weed.cache_dir`): the client's
dependencies and its build backend, so the test needs no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from infra.weed import cache_dir
from schemas.views import AccountingRecord
from services.ledger import Ledger
from services.settings import Settings
from tests.sink.scenario import run_facts

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = cache_dir() / "wheels"
SERVER = ("faust", "docker", "boto3", "pynvml", "asyncpg", "pydantic", "pydantic_settings",
          "schemas", "services", "projections", "infra", "mode", "botocore")  # fmt: skip
"""Top-level modules of the server and of its own dependencies (mode: faust's)."""

PROBE = """
import importlib, json, pkgutil, sys, importlib.metadata as md
import gridledger_client
for info in pkgutil.walk_packages(gridledger_client.__path__, "gridledger_client."):
    importlib.import_module(info.name)
print(json.dumps({"modules": sorted(sys.modules),
                  "dists": sorted(d.metadata["Name"].lower() for d in md.distributions()),
                  "file": gridledger_client.__file__}))
"""


def run(
    args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, env=env, cwd=cwd)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv holding ./client and its dependencies, nothing else."""
    if not any(WHEELHOUSE.glob("aiokafka-*.whl")):
        pytest.fail(f"no wheelhouse at {WHEELHOUSE}: run `bash infra/setup.sh` (make setup)")
    root = tmp_path_factory.mktemp("clean")
    source = root / "client"
    shutil.copytree(ROOT / "client", source, ignore=shutil.ignore_patterns("*.egg-info", "build"))
    venv = root / "venv"
    # No pip of its own (ensurepip costs seconds): this pip installs into it (--python).
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile",
         "--no-index", "--find-links", str(WHEELHOUSE), str(source)],
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull})  # fmt: skip
    return python


def test_the_client_installs_alone_and_imports_nothing_of_the_server(clean_python: Path) -> None:
    found = json.loads(run([str(clean_python), "-I", "-c", PROBE], cwd=clean_python.parent).stdout)
    assert not found["file"].startswith(str(ROOT)), "the installed copy, not the checkout"
    leaked = [m for m in found["modules"] if m.split(".")[0] in SERVER]
    assert leaked == [], f"importing gridledger_client pulled in {leaked}"
    server = {"gridledger", "faust-streaming", "docker", "boto3", "nvidia-ml-py", "asyncpg",
              "pydantic"}  # fmt: skip
    assert server.isdisjoint(found["dists"]), found["dists"]
    assert {"gridledger-client", "aiokafka", "fastavro"} <= set(found["dists"])


async def test_the_example_service_from_the_clean_venv_prints_what_each_ending_asks_for(
    clean_python: Path, topics: Settings
) -> None:
    failed, ok = (f"job-{uuid.uuid4().hex[:12]}" for _ in range(2))
    record = AccountingRecord(
        job_id=ok, tenant="dev", status="succeeded", final=True, policy_version="1",
        billable_gpu_seconds=30.0, gpu_seconds=30.0,
    )  # fmt: skip
    failing = run_facts(failed, exit_code=1).job_events
    async with Ledger(topics, "test") as ledger:
        await ledger.append_many([*failing, *run_facts(ok).job_events])
        await ledger.append_many(failing[-2:])  # the classifier's decisions, redelivered
        await ledger.publish("accounting", ok, record)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "GRIDLEDGER_KAFKA_BOOTSTRAP": topics.kafka_bootstrap,
        "GRIDLEDGER_TOPIC_PREFIX": topics.topic_prefix,
    }
    done = run(
        [str(clean_python), "-I", str(ROOT / "examples" / "subscriber.py"), "--from-beginning",
         "--idle-exit", "3"],
        env=env, cwd=clean_python.parent,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert (
        lines.count(
            f"{failed} attempt 1 missing_module · user: "
            "add transformers to the image (pip install transformers) and resubmit"
        )
        == 1
    ), done.stdout
    assert f"{ok} succeeded" in lines
    assert f"{ok} final: 30.0 GPU-s billable, 0.0 credited (policy 1)" in lines
    assert "(1 repeated records dropped)" in done.stderr  # JobFailed is filtered by its header
