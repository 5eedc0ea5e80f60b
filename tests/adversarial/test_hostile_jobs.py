"""(b) of issue 21: the attacker's jobs, on real agents and real containers.

Each attack (a row of :mod:`tests.adversarial.attacks`) is a job of tenant
``other`` that ends in exactly one terminal state: whatever it linked, made or
declared, nothing but its own regular files is stored, each refused path is
named, the failure is the user's, and the job is billed (never credited). After
each, every check of :mod:`tests.adversarial.after` holds. The CI subset runs
the rows marked ``quick``; ``GRIDLEDGER_ADVERSARIAL_FULL=1`` runs them all.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.request
from typing import Any

import pytest

from tests.adversarial.after import check_all, check_victim_served
from tests.adversarial.attacks import ATTACKS, Attack, spec_fields
from tests.adversarial.stack import ATTACKER, VICTIM, Hostile, full, only_in_full, sh_job
from tests.system.conftest import TERMINAL_EVENTS

pytestmark = pytest.mark.integration


def host_paths(hostile: Hostile) -> dict[str, str]:
    if not hostile.victim_outputs:
        check_victim_served(hostile)
    job_id = next(iter(hostile.victim_outputs))
    node = hostile.job_of(VICTIM, job_id)["attempts"][0]["node_id"]
    home = hostile.settings.home
    return {
        "home": str(home),
        "work": str(home / "work"),
        "canary": str(hostile.canary),
        "creds": str(hostile.settings.s3_credentials_path),
        "victim_out": str(home / "work" / node / f"{job_id}.1" / "output" / "out.bin"),
    }


def run_attack(hostile: Hostile, attack: Attack) -> tuple[str, dict[str, Any]]:
    script = attack.script.format(**host_paths(hostile))
    spec = sh_job(script, name=attack.name, **spec_fields(attack))
    job_id = hostile.submit_as(ATTACKER, spec)
    hostile.wait_settled(ATTACKER, [job_id], timeout_s=180)
    client = hostile.attacker
    events = client.get(f"/v1/jobs/{job_id}/events")["events"]
    terminals = [e["type"] for e in events if e["type"] in TERMINAL_EVENTS]
    assert len(terminals) == 1, terminals
    doc: dict[str, Any] = client.get(f"/v1/jobs/{job_id}")
    return job_id, doc


ROWS = [a for a in ATTACKS if a.quick or full()]


@pytest.mark.parametrize("attack", ROWS, ids=lambda a: a.name)
def test_a_hostile_job_stores_nothing_but_its_own_files_and_pays(
    hostile: Hostile, attack: Attack
) -> None:
    job_id, doc = run_attack(hostile, attack)
    failure = doc.get("failure") or {}
    accounting = doc["accounting"]
    assert failure.get("attribution") in (None, "user"), failure
    assert accounting["credited_gpu_seconds"] == 0, accounting
    assert accounting["billable_gpu_seconds"] > 0, accounting
    stored = {a["path"] for a in hostile.attacker.get(f"/v1/jobs/{job_id}/artifacts")["artifacts"]}
    told = json.dumps([doc.get("outputs"), failure])
    for path in attack.refused:
        assert path not in stored, f"{path} was stored"
        assert f"'{path}'" in told or f'"{path}"' in told, f"{path} is not named: {told[:2000]}"
    for path in set(attack.outputs) - set(attack.refused):
        assert path in stored, (path, sorted(stored))
    if attack.refused:
        assert failure.get("failure_class") == "optional_output_refused", failure
    if attack.log_says:
        logs = logs_text(hostile, job_id).decode(errors="replace")
        assert re.search(attack.log_says, logs), logs[-2000:]
    check_all(hostile)


def test_control_characters_in_log_lines_reach_the_user_and_stop_nothing(
    hostile: Hostile,
) -> None:
    script = r"printf 'nul:\000:esc:\033[31m:del:\177:bell:\007:c1:\302\205:end\n'; echo after"
    job_id = hostile.submit_as(ATTACKER, sh_job(script, name="log-bytes"))
    hostile.wait_settled(ATTACKER, [job_id])
    doc = hostile.job_of(ATTACKER, job_id)
    assert doc["status"] == "succeeded", doc.get("failure")
    # Every byte the job wrote reaches the user as it was written.
    assert LOG_LINE in logs_text(hostile, job_id), logs_text(hostile, job_id)
    check_all(hostile)


LOG_LINE = b"nul:\x00:esc:\x1b[31m:del:\x7f:bell:\x07:c1:\xc2\x85:end\nafter"


def logs_text(hostile: Hostile, job_id: str) -> bytes:
    base = f"http://{hostile.settings.api_host}:{hostile.settings.api_port}"
    request = urllib.request.Request(
        f"{base}/v1/jobs/{job_id}/logs",
        headers={"Authorization": f"Bearer {hostile.attacker.token}", "Accept": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return bytes(reply.read())


@only_in_full("a cross-tenant secret")
def test_the_victims_secret_never_reaches_the_attackers_job(hostile: Hostile) -> None:
    value = f"victim secret {secrets.token_hex(16)}"
    base = f"http://{hostile.settings.api_host}:{hostile.settings.api_port}"
    put = urllib.request.Request(
        f"{base}/v1/secrets/hf-token",
        data=json.dumps({"value": value}).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {hostile.victim.token}",
                 "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(put, timeout=30) as reply:
        assert reply.status in (200, 201)
    hostile.victim_secrets["hf-token"] = value.encode()
    script = 'env > "$GRIDLEDGER_OUTPUT_DIR/env.txt"; echo "token=$TOKEN"'
    spec = sh_job(script, secrets={"TOKEN": "hf-token"}, outputs=[{"path": "env.txt"}])
    job_id = hostile.submit_as(ATTACKER, spec)
    hostile.wait_settled(ATTACKER, [job_id])
    failure = hostile.job_of(ATTACKER, job_id).get("failure") or {}
    assert failure.get("failure_class") == "secret_missing", failure
    assert failure["attribution"] == "user" and "hf-token" in failure["summary"], failure
    assert value.encode() not in logs_text(hostile, job_id)
    check_all(hostile)
