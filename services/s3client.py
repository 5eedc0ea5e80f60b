"""The S3 calls gridledger makes, through boto3, with errors that name the store's answer.

Blocking by design: the agent runs them on its thread pool, the API on a worker
thread. boto3 was measured against aiobotocore and obstore on the local
SeaweedFS (64 KiB and 64 MiB objects); none was faster by a margin that
matters next to a job's runtime, and boto3 brings managed multipart transfers,
per-request retries with capped exponential backoff (botocore's ``standard``
mode) and offline URL signing.

Every failure becomes :class:`ObjectStoreError` whose message says what was
attempted, where, and what the store (or the network) said, e.g.
``storing s3://gridledger/tenants/dev/... failed: AccessDenied: Access Denied``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import boto3
import botocore.exceptions
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from services.objectstore import (
    Credential,
    CredentialsFile,
    ObjectRef,
    ObjectStoreError,
    Role,
    tenant_prefix,
)
from services.settings import Settings

T = TypeVar("T")

PART_BYTES = 16 * 1024 * 1024
"""Multipart threshold and part size: a file above it is uploaded in parts, each retried alone."""
_CHUNK = 1024 * 1024

_TRANSFER = TransferConfig(
    multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=4
)

_ERRORS: tuple[type[BaseException], ...] = (
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
    S3UploadFailedError,
)


def make_client(settings: Settings, credential: Credential, endpoint: str = "") -> Any:
    """A thread-safe S3 client for one credential (at ``endpoint``, default ``s3_url``)."""
    config = Config(
        region_name=settings.s3_region,
        signature_version="s3v4",
        s3={"addressing_style": settings.s3_addressing_style},
        retries={"mode": "standard", "max_attempts": settings.s3_max_attempts},
        connect_timeout=settings.s3_connect_timeout_s,
        read_timeout=60,
        # Checksums only where S3 requires them: several S3-compatible stores (GCS
        # interoperability, older Ceph) reject the newer default trailing checksums.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint or settings.s3_url,
        aws_access_key_id=credential.access_key,
        aws_secret_access_key=credential.secret_key,
        config=config,
    )


class TenantClients:
    """One client per tenant for one role, from the credentials file.

    The file is read again when it changes (``dev up`` adds tenants to it); a
    tenant's client is made once per version of the file.
    """

    def __init__(self, settings: Settings, role: Role, endpoint: str = "") -> None:
        self.settings = settings
        self.role = role
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._creds: CredentialsFile | None = None
        self._stamp: tuple[int, int] | None = None

    def credentials(self) -> CredentialsFile:
        """The credentials file, re-read when it changed on disk, so rotated keys apply without a
        restart."""
        path = self.settings.s3_credentials_path
        with self._lock:
            stamp = None
            with contextlib.suppress(OSError):
                st = path.stat()
                stamp = (st.st_mtime_ns, st.st_size)
            if self._creds is None or stamp != self._stamp:
                self._creds = CredentialsFile.load(path)
                self._stamp = stamp
                self._clients.clear()
            return self._creds

    def client(self, tenant: str) -> Any:
        """The tenant's client; ObjectStoreError naming the file when it has no credential."""
        creds = self.credentials()
        with self._lock:
            if tenant not in self._clients:
                path = self.settings.s3_credentials_path
                credential = creds.credential(tenant, self.role, path)
                self._clients[tenant] = make_client(self.settings, credential, self.endpoint)
            return self._clients[tenant]


def describe(exc: BaseException) -> str:
    """The store's answer in one line: ``Code: message`` for S3 errors, else the error."""
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{code}: {error.get('Message') or exc}"
    if isinstance(exc, S3UploadFailedError) and exc.__context__ is not None:
        return describe(exc.__context__)
    return str(exc)


def call(what: str, fn: Callable[[], T]) -> T:
    """Run one S3 call; its failure becomes an ObjectStoreError naming ``what``."""
    try:
        return fn()
    except _ERRORS as exc:
        raise ObjectStoreError(f"{what} failed: {describe(exc)}") from exc


def sha256_of(source: BinaryIO) -> tuple[str, int]:
    """The SHA-256 and size of a file's bytes from its current position, read in blocks
    (outputs can be larger than memory)."""
    digest = hashlib.sha256()
    size = 0
    while block := source.read(_CHUNK):
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


def upload(client: Any, ref: ObjectRef, source: BinaryIO) -> tuple[str, int]:
    """Upload an opened, seekable file (in parts when large); return its sha256 and size.

    The sha256 is computed before the upload and stored as the object's
    ``sha256`` metadata too, so a download can be checked against the object itself.
    """
    start = source.tell()
    sha256, size = sha256_of(source)
    source.seek(start)
    call(
        f"storing {ref.uri}",
        lambda: client.upload_fileobj(
            source, ref.bucket, ref.key, ExtraArgs={"Metadata": {"sha256": sha256}},
            Config=_TRANSFER,
        ),
    )  # fmt: skip
    return sha256, size


def download(client: Any, ref: ObjectRef, target: Path, sha256: str) -> int:
    """Stream an object to ``target``, verifying its sha256; return its size.

    Raises:
        ChecksumMismatchError: the bytes are not the ones recorded (``target`` is not left behind).
        ObjectStoreError: the store refused or failed.
    """
    partial = target.with_name(f".{target.name}.partial")
    digest = hashlib.sha256()
    size = 0
    try:
        reply = call(
            f"reading {ref.uri}", lambda: client.get_object(Bucket=ref.bucket, Key=ref.key)
        )
        with partial.open("wb") as out:
            body = reply["Body"]
            try:
                for block in body.iter_chunks(_CHUNK):
                    digest.update(block)
                    size += len(block)
                    out.write(block)
            except _ERRORS as exc:
                raise ObjectStoreError(f"reading {ref.uri} failed: {describe(exc)}") from exc
            finally:
                body.close()
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise ChecksumMismatchError(
                f"{ref.uri} has sha256 {digest.hexdigest()} ({size} bytes), the recorded "
                f"checkpoint has sha256 {sha256}"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return size


class ChecksumMismatchError(ObjectStoreError):
    """The object's bytes do not hash to the recorded sha256."""


def presign(client: Any, ref: ObjectRef, ttl_s: int, filename: str) -> str:
    """A GET URL valid for ``ttl_s`` seconds; signed locally, no request is made."""
    return call(
        f"signing {ref.uri}",
        lambda: client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": ref.bucket,
                "Key": ref.key,
                "ResponseContentDisposition": f'attachment; filename="{filename}"',
            },
            ExpiresIn=ttl_s,
        ),
    )


def ensure_bucket(settings: Settings, admin: Credential) -> None:
    """Create the bucket unless it exists, prove a write works, set each tenant's retention.

    Retention is a lifecycle expiration rule per tenant prefix.
    """
    client = make_client(settings, admin)
    bucket = settings.s3_bucket
    try:
        client.head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in {"404", "NoSuchBucket", "NotFound"}:
            raise ObjectStoreError(f"checking bucket {bucket} failed: {describe(exc)}") from exc
        call(f"creating bucket {bucket}", lambda: client.create_bucket(Bucket=bucket))
    except botocore.exceptions.BotoCoreError as exc:
        raise ObjectStoreError(f"checking bucket {bucket} failed: {describe(exc)}") from exc
    # A gateway that answers is not yet a store that stores: the volume server registers
    # with the master a moment later. A real write proves it (and makes the next one fast).
    probe = "_gridledger/ready"
    call(f"writing {probe} to bucket {bucket}", lambda: client.put_object(
        Bucket=bucket, Key=probe, Body=b"ok"))  # fmt: skip
    call(f"deleting {probe}", lambda: client.delete_object(Bucket=bucket, Key=probe))
    rules = lifecycle_rules(settings, CredentialsFile.load(settings.s3_credentials_path))
    call(
        f"setting the retention of bucket {bucket}",
        lambda: client.put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": rules}
        ),
    )


def lifecycle_rules(settings: Settings, creds: CredentialsFile) -> list[dict[str, Any]]:
    """One expiration rule per tenant prefix: the tenant's retention, else the default."""
    return [
        {
            "ID": f"retention-{tenant}",
            "Filter": {"Prefix": tenant_prefix(tenant)},
            "Status": "Enabled",
            "Expiration": {"Days": creds.retention_days(tenant, settings.artifact_retention_days)},
        }
        for tenant in sorted(creds.tenants)
    ]
