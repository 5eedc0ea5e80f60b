"""The adversarial suite's installation: every service and two agents, two tenants.

One :class:`Hostile` set for the suite (``conftest.py``: its own home, topics,
Postgres schema, API port, tokens file, and the session's private object store):
``gridledger sink``, ``api``, ``scheduler`` and ``processors`` as real processes
under the ops supervisor (nothing restarted: a service that exits fails the
test), two real Docker agents, and the tenants ``dev`` (the victim) and
``other`` (the attacker).

After each attack :func:`tests.adversarial.after.check_all` asserts what the
issue promises whatever a tenant sends.

``GRIDLEDGER_ADVERSARIAL_FULL=1`` runs every attack and the larger schemathesis
budget; without it the suite runs its quick CI subset (:func:`full`).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from infra import tokens
from services import secretstore
from services.cli.client import ApiClient, base_url
from services.settings import Settings
from tests.objectstore import PrivateStore
from tests.system.conftest import BUSYBOX, TERMINAL, System, system_settings

VICTIM = "dev"
ATTACKER = "other"
NODES = ("adv-a", "adv-b")
MIB = 1024 * 1024
AGENT_LIMITS = {
    "GRIDLEDGER_AGENT_MAX_OUTPUT_FILE_BYTES": str(MIB),
    "GRIDLEDGER_AGENT_MAX_OUTPUT_JOB_BYTES": str(2 * MIB),
    "GRIDLEDGER_AGENT_PIDS_LIMIT": "64",
}
"""Small caps, so an attack passes them in a second: 1 MiB a file, 2 MiB an attempt, 64
processes a container."""


def full() -> bool:
    """Whether the whole suite runs (``GRIDLEDGER_ADVERSARIAL_FULL=1``) or its CI subset."""
    return os.environ.get("GRIDLEDGER_ADVERSARIAL_FULL", "") not in ("", "0")


def only_in_full(reason: str) -> pytest.MarkDecorator:
    """Mark an attack of the full set: skipped in the quick CI subset."""
    return pytest.mark.skipif(not full(), reason=f"{reason}; GRIDLEDGER_ADVERSARIAL_FULL=1 runs it")


class Hostile(System):
    """A :class:`System` with a client per tenant, host secrets to look for, and the
    after-checks."""

    def __init__(self, settings: Settings, work: Path, store: PrivateStore) -> None:
        super().__init__(settings, work)
        self.store = store
        self.tenants: dict[str, ApiClient] = {}
        self.victim_jobs: list[str] = []
        self.attacker_jobs: list[str] = []
        self.canary = work / "host-canary.txt"
        """A host file no job may ever see: its content is a fresh secret."""
        self.canary.write_text(f"host canary {secrets.token_hex(16)}\n")
        self.pids: dict[str, int] = {}
        self.victim_outputs: dict[str, bytes] = {}
        self.victim_secrets: dict[str, bytes] = {}
        """Values of the victim's secrets, by name: no download of the attacker may hold one."""
        """What the victim's jobs stored, by job: no download of the attacker may hold it."""

    def start(self) -> Hostile:
        super().start()
        url = base_url(self.settings, None)
        self.tenants = {
            tenant: ApiClient(url, tokens.token_for(self.settings, tenant))
            for tenant in (VICTIM, ATTACKER)
        }
        for node in NODES:
            self.start_agent(node, env=AGENT_LIMITS)
        self.pids = {name: child.pid for name, child in self.services.children.items() if child.pid}
        return self

    @property
    def victim(self) -> ApiClient:
        return self.tenants[VICTIM]

    @property
    def attacker(self) -> ApiClient:
        return self.tenants[ATTACKER]

    def submit_as(self, tenant: str, spec: dict[str, Any]) -> str:
        """Submit ``spec`` as ``tenant``; the job is remembered for the after-checks."""
        reply = self.tenants[tenant].post("/v1/jobs", json.dumps(spec).encode())
        job_id = str(reply["job_id"])
        (self.victim_jobs if tenant == VICTIM else self.attacker_jobs).append(job_id)
        return job_id

    def job_of(self, tenant: str, job_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.tenants[tenant].get(f"/v1/jobs/{job_id}")
        return doc

    def wait_settled(self, tenant: str, job_ids: list[str], timeout_s: float = 120) -> None:
        """Terminal in the tenant's read model, accounting final."""
        client = self.tenants[tenant]
        self.wait_for(
            lambda: all(
                client.get(f"/v1/jobs/{j}")["status"] in TERMINAL
                and client.get(f"/v1/jobs/{j}/accounting").get("final")
                for j in job_ids
            ),
            timeout_s,
            f"{tenant}'s jobs {job_ids} to end",
        )


def hostile_settings(base: Settings, work: Path, store: PrivateStore) -> Settings:
    """Own home (tokens file and secrets key inside it, the agents' folders beside it), own
    topics, schema, API port, and the private object store."""
    # The fuzzer reads every answer to its end: an event stream ends after 1 s here.
    settings = system_settings(
        base, work, tokens_file=work / "tokens.json", events_stream_max_s=1.0
    )
    settings = store.service_settings(settings)
    tokens.ensure_tokens(settings)
    secretstore.ensure_key(settings)
    return settings


def sh_job(script: str, **fields: Any) -> dict[str, Any]:
    """A busybox job spec running ``script`` on one GPU."""
    spec: dict[str, Any] = {
        "image": BUSYBOX,
        "command": ["sh", "-c", script],
        "resources": {"gpus": 1, "memory_gb": 0.25},
        "limits": {"max_runtime_s": 120, "queue_timeout_s": 120},
        "retry": {"max_attempts": 1},
    }
    spec.update(fields)
    return spec
