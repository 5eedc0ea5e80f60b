"""(b) of issue 21, at the edge: what the attacker sends is refused before it is recorded.

Each row is a request of tenant ``other``: a NUL or another control character in
every string field of the spec, reserved environment names, numbers that are not
finite or would mean "no limit", a 5,000-digit integer, 20,000-deep JSON, a 2 MiB
spec, a forged cursor, a control character in a header, another tenant's job as
``resume_from``. Each answer is a 4xx ``application/problem+json`` naming the field
(where there is one); nothing reaches the ledger (the attacker's job list does not
grow); afterwards every check of :mod:`tests.adversarial.after` holds.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from tests.adversarial.after import check_all, check_victim_served, list_jobs
from tests.adversarial.stack import Hostile, sh_job

pytestmark = pytest.mark.integration

CONTROLS = ("\x00", "\x1b[31m", "\x7f", "\x85")
"""NUL, an escape sequence, DEL and a C1 control."""


@dataclass(frozen=True)
class Refusal:
    """One hostile request and the answer it must get."""

    name: str
    body: bytes
    statuses: tuple[int, ...]
    field: str | None
    """The field the problem must name (a prefix of it), None for a whole-body refusal."""
    path: str = "/v1/jobs"
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()


def _spec(**fields: Any) -> dict[str, Any]:
    return sh_job("echo hi", **fields)


def _put(spec: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """``spec`` with ``value`` at ``dotted`` (``a.b`` keys; ``[k]`` a map key)."""
    node = spec
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return spec


STRING_FIELDS: tuple[tuple[str, str, Any], ...] = (
    # (name of the row, the problem's field, how the control character goes in)
    ("name", "name", lambda c: _spec(name=f"x{c}y")),
    ("image", "image", lambda c: _spec(image=f"gridledger/busybox{c}:latest")),
    ("command", "command", lambda c: _spec(command=["sh", "-c", f"echo {c}"])),
    ("env value", "env", lambda c: _spec(env={"MODE": f"a{c}b"})),
    ("env name", "env", lambda c: _spec(env={f"MO{c}DE": "a"})),
    ("output path", "outputs", lambda c: _spec(outputs=[{"path": f"model{c}.pt"}])),
    ("checkpoints", "checkpoints", lambda c: _spec(checkpoints=f"ckpt{c}")),
    ("resume_from", "resume_from", lambda c: _spec(resume_from=f"job-{c}")),
    ("gpu model", "resources", lambda c: _put(_spec(), "resources.gpu_models", [f"L4{c}"])),
    ("provider", "placement", lambda c: _spec(placement={"providers": [f"acme{c}"]})),
    ("region", "placement", lambda c: _spec(placement={"regions": [f"eu{c}"]})),
    ("avoided node", "placement", lambda c: _spec(placement={"avoid_nodes": [f"n{c}"]})),
    ("label key", "labels", lambda c: _spec(labels={f"team{c}": "a"})),
    ("label value", "labels", lambda c: _spec(labels={"team": f"a{c}"})),
    ("secret name", "secrets", lambda c: _spec(secrets={"TOKEN": f"hf{c}token"})),
)


def _json(spec: dict[str, Any]) -> bytes:
    return json.dumps(spec).encode()


def _deep(depth: int) -> bytes:
    return b'{"image": "gridledger/busybox:latest", "env": ' + b"[" * depth + b"]" * depth + b"}"


REFUSALS: tuple[Refusal, ...] = (
    *(
        Refusal(f"{char!r} in {name}", _json(make(char)), (422,), field)
        for name, field, make in STRING_FIELDS
        for char in CONTROLS
    ),
    *(
        Refusal(f"reserved env {env}", _json(_spec(env={env: "all"})), (422,), "env")
        for env in (
            "NVIDIA_VISIBLE_DEVICES",
            "nvidia_driver_capabilities",
            "CUDA_VISIBLE_DEVICES",
            "GRIDLEDGER_OUTPUT_DIR",
            "GRIDLEDGER_JOB_ID",
        )
    ),
    Refusal(
        "min_vram_gb Infinity",
        _json(_put(_spec(), "resources.min_vram_gb", float("inf"))),
        (400, 422),
        "resources",
    ),
    Refusal(
        "min_vram_gb NaN",
        _json(_put(_spec(), "resources.min_vram_gb", float("nan"))),
        (400, 422),
        "resources",
    ),
    Refusal(
        "memory_gb 1e-10", _json(_put(_spec(), "resources.memory_gb", 1e-10)), (422,), "resources"
    ),
    Refusal("cpus 1e-10", _json(_put(_spec(), "resources.cpus", 1e-10)), (422,), "resources"),
    Refusal(
        "a 5,000-digit integer",
        b'{"image": "gridledger/busybox:latest", "resources": {"gpus": ' + b"9" * 5000 + b"}}",
        (400, 413, 422),
        None,
    ),
    Refusal("20,000-deep JSON", _deep(20_000), (400, 413, 422), None),
    Refusal("a 2 MiB spec", _json(_spec(env={"BLOB": "x" * (2 * 1024 * 1024)})), (413, 422), None),
    Refusal(
        "a spec just under the body limit but over the spec budget",
        _json(_spec(env={f"V{i}": "x" * 60_000 for i in range(15)})),
        (413, 422),
        None,
    ),
    Refusal("a forged cursor", b"", (400, 422), "cursor", "/v1/jobs?cursor=Zm9yZ2Vk%00", "GET"),
    Refusal(
        # A C1 control: the HTTP parser passes it (it refuses C0 ones itself, with its own
        # text/plain 400), the API must refuse it.
        "a control character in Idempotency-Key",
        _json(_spec()),
        (400,),
        "Idempotency-Key",
        headers=(("Idempotency-Key", "key\x85"),),
    ),
)


def send(hostile: Hostile, refusal: Refusal) -> tuple[int, str, Any]:
    base = f"http://{hostile.settings.api_host}:{hostile.settings.api_port}"
    request = urllib.request.Request(
        base + refusal.path,
        data=refusal.body if refusal.method == "POST" else None,
        method=refusal.method,
        headers={
            "Authorization": f"Bearer {hostile.attacker.token}",
            "Content-Type": "application/json",
            **dict(refusal.headers),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw[:300].decode(errors="replace")
        return exc.code, exc.headers.get("Content-Type", ""), body


def test_every_hostile_request_is_refused_naming_the_field(hostile: Hostile) -> None:
    before = set(list_jobs(hostile.attacker))
    wrong: list[str] = []
    for refusal in REFUSALS:
        status, media, body = send(hostile, refusal)
        problem = body if isinstance(body, dict) else {}
        named = [str(p.get("field", "")) for p in problem.get("problems", [])]
        named.append(str(problem.get("field", "")))
        if status not in refusal.statuses:
            wrong.append(f"{refusal.name}: {status} {json.dumps(body)[:300]}")
        elif not media.startswith("application/problem+json") or not problem.get("detail"):
            wrong.append(f"{refusal.name}: {status} as {media!r}: {json.dumps(body)[:300]}")
        elif refusal.field and not any(n.startswith(refusal.field) for n in named):
            wrong.append(f"{refusal.name}: names {named}, not {refusal.field}")
    assert not wrong, "\n".join(wrong)
    assert set(list_jobs(hostile.attacker)) == before, "a refused request made a job"
    check_all(hostile)


def test_resume_from_another_tenants_job_is_a_404(hostile: Hostile) -> None:
    if not hostile.victim_outputs:
        check_victim_served(hostile)
    victims_job = next(iter(hostile.victim_outputs))
    body = _json(_spec(resume_from=victims_job))
    status, media, problem = send(hostile, Refusal("resume", body, (404,), "resume_from"))
    assert status == 404, problem
    assert media.startswith("application/problem+json"), media
    assert victims_job in problem["detail"] and problem.get("field") == "resume_from", problem
