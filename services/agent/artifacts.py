"""Where checkpoints and outputs are kept: the artifact store interface and its S3 store.

Every agent stores into an S3-compatible object store (the local stack runs
SeaweedFS; AWS, GCS or Ceph work the same way, see services/objectstore.py for
the key layout and credentials). The store is an interface so the attempt
logic does not know the client library; :class:`S3Store` is its one
implementation. Calls block: the agent runs them on its thread pool.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from services import s3client
from services.agent.confine import Caps, open_artifact
from services.agent.errors import ArtifactChecksumError, ArtifactStoreError
from services.objectstore import ObjectRef, ObjectStoreError, object_key
from services.ops import metrics
from services.settings import Settings

_TRAILING_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class StoredArtifact:
    """Where an upload went, with the digest and size the OutputStored or CheckpointStored event
    records."""

    uri: str
    sha256: str
    bytes: int


class ArtifactStore(Protocol):
    """Where the agent stores outputs and checkpoints, and fetches a checkpoint to resume from."""

    def put(
        self, tenant: str, job_id: str, attempt: int, path: str, source: BinaryIO
    ) -> StoredArtifact:
        """Store the opened file ``source`` (seekable, read from its start) as ``path`` of the
        attempt; raise ArtifactStoreError on failure."""
        ...

    def fetch(self, tenant: str, uri: str, sha256: str, target: Path) -> int:
        """Download ``uri`` to ``target`` and verify it; return its size.

        Raises:
            ArtifactChecksumError: the bytes do not hash to ``sha256``.
            ArtifactStoreError: the object is not the tenant's, or the store failed.
        """
        ...


def checkpoint_step(name: str) -> int | None:
    """The step a checkpoint name carries: the last number in its file name without suffix.

    ``step_1200.pt`` → 1200, ``ckpt-0003.bin`` → 3, ``epoch2/step20`` → 20, ``latest.pt`` → None.
    """
    stem = Path(name).name.split(".", 1)[0]
    match = _TRAILING_NUMBER.search(stem)
    return int(match.group(1)) if match else None


class S3Store:
    """Artifacts as objects under the tenant's prefix, written with its agent credential."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._clients = s3client.TenantClients(settings, "agent")

    def put(
        self, tenant: str, job_id: str, attempt: int, path: str, source: BinaryIO
    ) -> StoredArtifact:
        """Upload the opened file ``source`` under the attempt's prefix (the agent opened and
        checked it: services/agent/confine.py)."""
        try:
            ref = ObjectRef(self.settings.s3_bucket, object_key(tenant, job_id, attempt, path))
            sha256, size = s3client.upload(self._client(tenant), ref, source)
        except ObjectStoreError as exc:
            raise ArtifactStoreError(str(exc)) from exc
        except OSError as exc:
            raise ArtifactStoreError(f"reading {path} to store it failed: {exc}") from exc
        return StoredArtifact(uri=ref.uri, sha256=sha256, bytes=size)

    def fetch(self, tenant: str, uri: str, sha256: str, target: Path) -> int:
        """Download ``uri`` to ``target``, sha256-verified, refusing another tenant's key;
        returns the size."""
        try:
            ref = ObjectRef.parse(uri)
            if not ref.owned_by(tenant):
                raise ArtifactStoreError(
                    f"{uri} is not an object of tenant {tenant!r}; a job resumes only from "
                    "checkpoints of its own tenant"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            return s3client.download(self._client(tenant), ref, target, sha256)
        except s3client.ChecksumMismatchError as exc:
            raise ArtifactChecksumError(str(exc)) from exc
        except ObjectStoreError as exc:
            raise ArtifactStoreError(str(exc)) from exc
        except OSError as exc:
            raise ArtifactStoreError(f"writing {uri} to {target} failed: {exc}") from exc

    def _client(self, tenant: str) -> Any:
        return self._clients.client(tenant)


def put_confined(
    store: ArtifactStore,
    tenant: str,
    job_id: str,
    attempt: int,
    root: Path,
    path: str,
    caps: Caps,
    used: int,
    deadline_s: float,
) -> StoredArtifact:
    """Store the job's file ``path`` under ``root`` as ``path`` of the attempt, opened and
    checked by :func:`services.agent.confine.open_artifact` (which raises ArtifactRefusedError or
    ArtifactMissingError for what the job wrote) and read from that descriptor only."""
    with open_artifact(root, path, caps, used, deadline_s) as source:
        stored = store.put(tenant, job_id, attempt, path, source)
        if source.raw.changed():
            # A running job rewrote it while it went up: the object may not hash to the sha256
            # read first. Not recorded, so nothing refers to it; the next scan stores it again.
            raise ArtifactStoreError(f"'{path}' changed while it was stored; not recorded")
        return stored


class MeteredStore:
    """Wraps a store; counts the bytes it stored (``gridledger_upload_bytes``)."""

    def __init__(self, inner: ArtifactStore) -> None:
        self.inner = inner

    def put(
        self, tenant: str, job_id: str, attempt: int, path: str, source: BinaryIO
    ) -> StoredArtifact:
        """Upload through the wrapped store (and count it)."""
        stored = self.inner.put(tenant, job_id, attempt, path, source)
        metrics.UPLOAD_BYTES.inc(stored.bytes)
        return stored

    def fetch(self, tenant: str, uri: str, sha256: str, target: Path) -> int:
        """Download through the wrapped store."""
        return self.inner.fetch(tenant, uri, sha256, target)
