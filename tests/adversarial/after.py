"""What must hold after every attack (issue 21, (d)), checked on the running installation.

- **Nothing leaks**: every artifact URL the attacker can get (every stored output and
  checkpoint of each of its jobs, each attempt) is downloaded, and no download holds a
  byte sequence of another tenant or of the host: a tenant's token, the tokens file,
  the host's ``/etc/passwd``, the object store's credentials file or a secret key of
  it, the host canary file, or the victim's outputs. The victim's jobs and their
  artifacts answer 404 to the attacker.
- **Every service is alive**: the same pid as at the start, and ``/healthz`` answers.
- **The victim's jobs succeed and are billed normally**: a fresh job of the victim ends
  ``succeeded``, its output downloadable by the victim with the bytes it wrote, billed
  (billable > 0, nothing credited), one terminal event, billable + credited = held.
- **The ledger and the read models agree**: ``gridledger replay --verify`` exits 0.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from services import tokens
from services.cli.client import ApiClient, ApiError
from services.ops.specs import settings_env
from tests.adversarial.stack import VICTIM, Hostile, sh_job
from tests.system.conftest import TERMINAL_EVENTS

MIN_SECRET = 12
"""Shorter needles (a common passwd line prefix, say) would match innocent bytes."""


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def secrets_of(hostile: Hostile) -> dict[str, bytes]:
    """Every byte sequence no download of the attacker may contain, by what it is."""
    found: dict[str, bytes] = {}
    settings = hostile.settings
    tokens_text = _read(settings.tokens_path)
    found["the tokens file"] = tokens_text
    found["the dev clients' tokens file"] = _read(tokens.dev_tokens_path(settings.tokens_path))
    for tenant, client in hostile.tenants.items():
        found[f"{tenant}'s token"] = client.token.encode()
    passwd = _read(Path("/etc/passwd"))
    found["the host's /etc/passwd"] = passwd
    creds_path = settings.s3_credentials_path
    found["the object store's credentials file"] = _read(creds_path)
    try:
        creds = json.loads(_read(creds_path) or b"{}")
    except ValueError:
        creds = {}
    for key in _secret_keys(creds):
        found[f"an object-store secret key ({key[:4]}…)"] = key.encode()
    found["the host canary file"] = _read(hostile.canary)
    for name, data in hostile.victim_outputs.items():
        found[f"the victim's output {name}"] = data
    for name, data in hostile.victim_secrets.items():
        found[f"the victim's secret {name}"] = data
    return {what: data for what, data in found.items() if len(data) >= MIN_SECRET}


def _secret_keys(node: Any) -> list[str]:
    if isinstance(node, dict):
        keys = [str(v) for k, v in node.items() if k == "secret_key" and v]
        for value in node.values():
            keys.extend(_secret_keys(value))
        return keys
    if isinstance(node, list):
        return [k for item in node for k in _secret_keys(item)]
    return []


def download(url: str) -> bytes:
    """A signed URL's bytes, fetched as a browser would (no gridledger credentials)."""
    assert urllib.parse.urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1"), url
    with urllib.request.urlopen(url, timeout=30) as reply:
        return bytes(reply.read())


def attacker_downloads(hostile: Hostile) -> dict[str, bytes]:
    """Every artifact the attacker can get a URL for, by ``job path@attempt``."""
    client = hostile.attacker
    got: dict[str, bytes] = {}
    for job_id in list_jobs(client):
        listing = client.get(f"/v1/jobs/{job_id}/artifacts")
        for artifact in listing["artifacts"]:
            query = urllib.parse.urlencode(
                {"path": artifact["path"], "attempt": artifact["attempt"]}
            )
            signed = client.get(f"/v1/jobs/{job_id}/artifacts/url?{query}")
            got[f"{job_id} {artifact['path']}@{artifact['attempt']}"] = download(signed["url"])
    return got


def list_jobs(client: ApiClient) -> list[str]:
    """Every job id of the client's tenant, following the cursor."""
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = client.get("/v1/jobs?limit=100" + (f"&cursor={cursor}" if cursor else ""))
        ids.extend(j["job_id"] for j in page["jobs"])
        cursor = page.get("next_cursor")
        if not cursor:
            return ids


def check_no_leak(hostile: Hostile) -> None:
    needles = secrets_of(hostile)
    for where, data in attacker_downloads(hostile).items():
        for what, secret in needles.items():
            assert secret not in data, f"the attacker downloaded {what} as {where}"
            # A line of it is a leak too (a partial copy, a truncated read).
            for line in secret.splitlines():
                if len(line) >= MIN_SECRET * 2:
                    assert line not in data, f"the attacker downloaded part of {what} as {where}"
    for job_id in hostile.victim_jobs:
        for path in ("", "/artifacts", "/artifacts/url?path=out.bin", "/logs", "/events"):
            try:
                hostile.attacker.get(f"/v1/jobs/{job_id}{path}")
            except ApiError as exc:
                assert exc.status == 404, (job_id, path, exc.status, exc.body)
            else:
                raise AssertionError(f"the attacker read the victim's {job_id}{path}")


def check_alive(hostile: Hostile) -> None:
    hostile.services.check_alive()
    for name, child in hostile.services.children.items():
        assert child.pid == hostile.pids.get(name, child.pid), f"{name} was restarted"
        assert child.pid is not None and child.alive(), f"{name} is not running"
        os.kill(child.pid, 0)
        url = hostile.services.ops_url(name)
        assert url is not None, f"{name} has no ops port"
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as reply:
            assert reply.status == 200, (name, reply.status)


def check_victim_served(hostile: Hostile) -> None:
    marker = f"victim output {secrets.token_hex(16)}"
    spec = sh_job(
        f'echo "working"; printf "%s" "{marker}" > "$GRIDLEDGER_OUTPUT_DIR/out.bin"',
        name="victim",
        outputs=[{"path": "out.bin"}],
    )
    job_id = hostile.submit_as(VICTIM, spec)
    hostile.wait_settled(VICTIM, [job_id])
    doc = hostile.job_of(VICTIM, job_id)
    assert doc["status"] == "succeeded", (doc["status"], doc.get("failure"))
    accounting = hostile.victim.get(f"/v1/jobs/{job_id}/accounting")
    assert accounting["billable_gpu_seconds"] > 0, accounting
    assert accounting["credited_gpu_seconds"] == 0, accounting
    total = accounting["billable_gpu_seconds"] + accounting["credited_gpu_seconds"]
    assert abs(total - accounting["gpu_seconds"]) < 1e-6, accounting
    events = hostile.victim.get(f"/v1/jobs/{job_id}/events")["events"]
    terminals = [e["type"] for e in events if e["type"] in TERMINAL_EVENTS]
    assert terminals == ["JobSucceeded"], terminals
    signed = hostile.victim.get(f"/v1/jobs/{job_id}/artifacts/url?path=out.bin")
    data = download(signed["url"])
    assert data == marker.encode()
    hostile.victim_outputs[job_id] = data


def check_replay(hostile: Hostile) -> None:
    env = {**os.environ, **settings_env(hostile.settings), "NO_COLOR": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "replay", "--verify", "--catch-up", "60"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def check_all(hostile: Hostile) -> None:
    """(d) of the issue, in the order a failure is easiest to read."""
    check_alive(hostile)
    check_victim_served(hostile)
    check_no_leak(hostile)
    check_replay(hostile)
    check_alive(hostile)
