"""Where artifacts live in the S3-compatible object store, and who may touch them.

One bucket (``Settings.s3_bucket``); every object of a tenant lives under
``tenants/<tenant>/``, and an object's key names its job and attempt::

    tenants/<tenant>/jobs/<job_id>/attempts/<attempt>/<path>

Events carry ``s3://<bucket>/<key>`` URIs. Credentials are per tenant and per
role, in one JSON file (``Settings.s3_credentials_path``; ``dev up`` writes it
for the local SeaweedFS, an operator writes it for AWS, GCS or Ceph)::

    {
      "admin": {"access_key": "...", "secret_key": "..."},
      "tenants": {
        "dev": {
          "agent":  {"access_key": "...", "secret_key": "..."},
          "reader": {"access_key": "...", "secret_key": "..."},
          "retention_days": 30
        }
      }
    }

``agent`` may write and read only its tenant's prefix (the agent uploads with
it and downloads checkpoints to resume from), ``reader`` may only read it (the
API signs download URLs with it), ``admin`` is used by ``dev up`` alone to
create the bucket. A service needs only its own part: an agent's file may omit
the readers, the API's the agents, and neither needs ``admin``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.errors import GridledgerError

Role = Literal["agent", "reader"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class ObjectStoreError(GridledgerError):
    """The object store refused, failed or is misconfigured; the message names the cause."""


class Credential(BaseModel):
    """One S3 key pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    access_key: str = Field(min_length=1)
    secret_key: str = Field(min_length=1)


class TenantCredentials(BaseModel):
    """A tenant's keys: the agent's (writes its prefix), the reader's (signs downloads), and its
    retention."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: Credential | None = None
    reader: Credential | None = None
    retention_days: int | None = Field(None, ge=1)
    """This tenant's retention of outputs and checkpoints; None: the platform default."""


class CredentialsFile(BaseModel):
    """The S3 credentials file: the admin key (bucket set-up) and each tenant's keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    admin: Credential | None = None
    tenants: dict[str, TenantCredentials] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> CredentialsFile:
        """Read and validate the file; an ObjectStoreError says where one comes from when it is
        missing."""
        try:
            return cls.model_validate(json.loads(path.read_text()))
        except FileNotFoundError as exc:
            raise ObjectStoreError(
                f"no S3 credentials file at {path}; `gridledger dev up` writes it for the local "
                "store, or point GRIDLEDGER_S3_CREDENTIALS_FILE at yours"
            ) from exc
        except (OSError, json.JSONDecodeError, ValidationError) as exc:
            raise ObjectStoreError(
                f"cannot read the S3 credentials file {path}: {exc}; fix it or delete it "
                "(`gridledger dev up` writes a new one for the local store)"
            ) from exc

    def credential(self, tenant: str, role: Role, path: Path) -> Credential:
        """The ``role`` credential of ``tenant``; a clear error naming the file when absent."""
        entry = self.tenants.get(tenant)
        found = getattr(entry, role) if entry is not None else None
        if found is None:
            raise ObjectStoreError(
                f"{path} has no {role!r} S3 credential for tenant {tenant!r}; add "
                f'"tenants": {{"{tenant}": {{"{role}": {{"access_key": ..., "secret_key": ...}}}}}}'
            )
        return found

    def retention_days(self, tenant: str, default: int) -> int:
        """The tenant's retention, or ``default`` when it sets none."""
        entry = self.tenants.get(tenant)
        return entry.retention_days if entry and entry.retention_days else default


def safe_segment(name: str) -> str:
    """A key segment that is the name itself when it is plain, never ``/`` or ``..``."""
    cleaned = _SAFE.sub("_", name)
    return cleaned if cleaned not in {"", ".", ".."} else "_"


def tenant_prefix(tenant: str) -> str:
    """The key prefix of everything a tenant owns: its credentials reach this far and no further."""
    return f"tenants/{safe_segment(tenant)}/"


def job_prefix(tenant: str, job_id: str) -> str:
    """The key prefix of one job's outputs and checkpoints, every attempt's."""
    return f"{tenant_prefix(tenant)}jobs/{safe_segment(job_id)}/"


def object_key(tenant: str, job_id: str, attempt: int, path: str) -> str:
    """The key of ``path`` (relative, ``/``-separated) of one attempt of a job."""
    parts = [p for p in path.split("/") if p not in {"", "."}]
    if not parts or ".." in parts:
        raise ObjectStoreError(f"artifact path {path!r} must be a relative path without '..'")
    return f"{job_prefix(tenant, job_id)}attempts/{attempt}/{'/'.join(parts)}"


@dataclass(frozen=True)
class ObjectRef:
    """A stored object's bucket and key, as events and the API name it (``s3://bucket/key``)."""

    bucket: str
    key: str

    @property
    def uri(self) -> str:
        """``s3://bucket/key``, the form events carry."""
        return f"s3://{self.bucket}/{self.key}"

    @classmethod
    def parse(cls, uri: str) -> ObjectRef:
        """``s3://bucket/key`` → ObjectRef; anything else is an error naming the URI."""
        scheme, sep, rest = uri.partition("://")
        bucket, slash, key = rest.partition("/")
        if scheme != "s3" or not sep or not bucket or not slash or not key:
            raise ObjectStoreError(f"{uri!r} is not an s3://bucket/key URI")
        return cls(bucket, key)

    def owned_by(self, tenant: str) -> bool:
        """Whether the object lies under the tenant's prefix (checked before downloads, resumes)."""
        return self.key.startswith(tenant_prefix(tenant))
