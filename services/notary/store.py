"""The seals' copy in the object store: one object per seal, beside the ``ledger-seals`` topic.

A broker administrator who rewrites the topics can rewrite ``ledger-seals`` too; the
store is a second place, with its own credentials, that ``audit verify --from-store``
reads instead. Keys::

    seals/<topic prefix>/<topic>/<partition>/<first offset, 20 digits>.json

(the prefix made a safe key segment), so a listing returns a partition's seals in
chain order. The notary writes with the store's ``admin`` credential of the
credentials file (services/objectstore.py): tenants' credentials reach only
``tenants/<tenant>/``, so no tenant can write or delete a seal.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from services import s3client
from services.notary.chain import Seal
from services.objectstore import CredentialsFile, ObjectStoreError, safe_segment
from services.settings import Settings

ROOT = "seals/"


def seal_key(seal: Seal) -> str:
    """Where one seal is stored."""
    return (
        f"{ROOT}{safe_segment(seal.prefix)}/{safe_segment(seal.topic)}/{seal.partition}/"
        f"{seal.first_offset:020d}.json"
    )


class SealStore:
    """Blocking S3 calls for the seals (the notary runs them on a worker thread)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The S3 client of the admin credential, made on first use."""
        if self._client is None:
            path = self.settings.s3_credentials_path
            admin = CredentialsFile.load(path).admin
            if admin is None:
                raise ObjectStoreError(
                    f"{path} has no 'admin' S3 credential, which the notary stores seals with"
                )
            self._client = s3client.make_client(self.settings, admin)
        return self._client

    def put(self, seal: Seal) -> str:
        """Store one seal (the same key and bytes again is a no-op); its key."""
        key = seal_key(seal)
        bucket = self.settings.s3_bucket
        s3client.call(
            f"storing s3://{bucket}/{key}",
            lambda: self.client.put_object(Bucket=bucket, Key=key, Body=seal.encode()),
        )
        return key

    def all(self, prefix: str) -> list[tuple[str, bytes]]:
        """(key, bytes) of every seal stored for the installation of ``prefix``, in key order."""
        bucket = self.settings.s3_bucket
        root = f"{ROOT}{safe_segment(prefix)}/"
        keys: list[str] = []
        token: dict[str, str] = {}
        while True:
            page = s3client.call(
                f"listing s3://{bucket}/{root}",
                partial(self.client.list_objects_v2, Bucket=bucket, Prefix=root, **token),
            )
            keys += [item["Key"] for item in page.get("Contents", ())]
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
        return [(key, self._get(bucket, key)) for key in sorted(keys)]

    def _get(self, bucket: str, key: str) -> bytes:
        reply = s3client.call(
            f"reading s3://{bucket}/{key}", lambda: self.client.get_object(Bucket=bucket, Key=key)
        )
        body = reply["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()
