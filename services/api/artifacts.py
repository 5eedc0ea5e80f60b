"""A job's stored outputs and checkpoints, and short-lived download URLs for them.

The list comes from the ledger (the OutputStored and CheckpointStored events
the sink recorded), not from listing the bucket: what the API shows is what
the job's history says was stored, with the sha256 recorded at the time. A URL
is signed only for an object in that list, with the job tenant's ``reader``
credential, which the store lets read nothing but that tenant's prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import asyncpg

from services import s3client
from services.clock import utcnow
from services.objectstore import ObjectRef, ObjectStoreError
from services.settings import Settings

Kind = Literal["output", "checkpoint"]
_TYPES = {"OutputStored": "output", "CheckpointStored": "checkpoint"}


@dataclass(frozen=True)
class Artifact:
    """A stored output or checkpoint as the API lists it."""

    kind: Kind
    path: str
    """Relative to the attempt's output folder: ``model.pt``, ``ckpt/step_20.pt``."""
    attempt: int
    uri: str
    sha256: str
    bytes: int
    stored_at: datetime
    step: int | None = None

    def to_json(self, retention_days: int) -> dict[str, Any]:
        """The listing entry, with when the object store will delete it."""
        return {
            "kind": self.kind,
            "path": self.path,
            "attempt": self.attempt,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "step": self.step,
            "uri": self.uri,
            "stored_at": self.stored_at.isoformat(),
            "expires_at": (self.stored_at + timedelta(days=retention_days)).isoformat(),
        }


def _relative_path(uri: str, fallback: str) -> str:
    """The part of the key after ``attempts/<n>/``."""
    _, sep, rest = uri.partition("/attempts/")
    _, slash, path = rest.partition("/")
    return path if sep and slash and path else fallback


async def of_job(pool: asyncpg.Pool, job_id: str) -> list[Artifact]:
    """Every output and checkpoint the job's attempts stored, in the order they were."""
    rows = await pool.fetch(
        "SELECT type, payload FROM job_events WHERE job_id = $1 AND type = ANY($2::text[]) "
        "ORDER BY seq",
        job_id,
        list(_TYPES),
    )
    found = []
    for row in rows:
        e = row["payload"] if isinstance(row["payload"], dict) else json.loads(row["payload"])
        name = e.get("path") or e.get("name", "")
        found.append(
            Artifact(
                kind=_TYPES[row["type"]],  # type: ignore[arg-type]
                path=_relative_path(e["uri"], name),
                attempt=int(e["attempt"]),
                uri=e["uri"],
                sha256=e["sha256"],
                bytes=int(e["bytes"]),
                stored_at=datetime.fromisoformat(e["occurred_at"]),
                step=e.get("step"),
            )
        )
    return found


def choose(found: list[Artifact], path: str, attempt: int | None) -> Artifact | None:
    """The artifact at ``path`` of ``attempt``, or of the latest attempt that stored it."""
    matches = [a for a in found if a.path == path and (attempt is None or a.attempt == attempt)]
    return max(matches, key=lambda a: (a.attempt, a.stored_at)) if matches else None


class Signer:
    """Signs download URLs with each tenant's reader credential; knows each tenant's retention."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Signed for the address users reach (a URL's signature covers its host).
        self._clients = s3client.TenantClients(
            settings, "reader", endpoint=settings.s3_public_endpoint
        )

    def retention_days(self, tenant: str) -> int:
        """The tenant's retention; the platform default when the credentials file cannot be read."""
        default = self.settings.artifact_retention_days
        try:
            return self._clients.credentials().retention_days(tenant, default)
        except ObjectStoreError:
            return default

    def sign(self, tenant: str, artifact: Artifact) -> dict[str, Any]:
        """A URL for the artifact, valid ``s3_presign_ttl_s``; ObjectStoreError when it cannot.

        Raises:
            ObjectStoreError: the object is outside the tenant's prefix, or the tenant has
                no reader credential.
        """
        ref = ObjectRef.parse(artifact.uri)
        if not ref.owned_by(tenant):
            raise ObjectStoreError(f"{artifact.uri} is not an object of tenant {tenant!r}")
        ttl = self.settings.s3_presign_ttl_s
        filename = artifact.path.rsplit("/", 1)[-1]
        url = s3client.presign(self._clients.client(tenant), ref, ttl, filename)
        return {
            "url": url,
            "url_expires_at": (utcnow() + timedelta(seconds=ttl)).isoformat(),
            **artifact.to_json(self.retention_days(tenant)),
        }
