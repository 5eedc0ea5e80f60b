"""The S3 artifact store on a real SeaweedFS: keys, checksums, multipart, tenant scoping."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from services import s3client
from services.agent.artifacts import S3Store, checkpoint_step, put_confined
from services.agent.confine import Caps
from services.agent.errors import ArtifactChecksumError, ArtifactStoreError
from services.objectstore import ObjectRef, ObjectStoreError, object_key
from tests.objectstore import PrivateStore


@pytest.fixture
def store(object_store: PrivateStore) -> S3Store:
    return S3Store(object_store.settings)


def test_put_stores_under_tenant_job_and_attempt_with_sha256(
    store: S3Store, object_store: PrivateStore, tmp_path: Path
):
    source = tmp_path / "src.bin"
    source.write_bytes(b"weights" * 1000)
    stored = store.put("dev", "job-1", 2, "ckpt/step_10.pt", io.BytesIO(source.read_bytes()))
    assert stored.uri == "s3://gridledger/tenants/dev/jobs/job-1/attempts/2/ckpt/step_10.pt"
    assert stored.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert stored.bytes == 7000
    assert object_store.read(stored.uri) == source.read_bytes()


def test_a_large_file_goes_up_in_parts_and_comes_back_verified(
    store: S3Store, object_store: PrivateStore, tmp_path: Path
):
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(s3client.PART_BYTES * 2 + 12345))
    stored = store.put("dev", "job-big", 1, "model.pt", io.BytesIO(source.read_bytes()))
    ref = ObjectRef.parse(stored.uri)
    admin = object_store.credentials.admin
    assert admin is not None
    head = s3client.make_client(object_store.settings, admin).head_object(
        Bucket=ref.bucket, Key=ref.key
    )
    # A multipart upload's ETag is "<md5 of the part md5s>-<number of parts>".
    assert head["ETag"].strip('"').endswith("-3")
    assert head["Metadata"]["sha256"] == stored.sha256
    target = tmp_path / "back" / "model.pt"
    assert store.fetch("dev", stored.uri, stored.sha256, target) == stored.bytes
    assert target.read_bytes() == source.read_bytes()


def test_fetch_refuses_bytes_that_do_not_match_and_leaves_nothing_behind(
    store: S3Store, tmp_path: Path
):
    source = tmp_path / "ckpt.pt"
    source.write_bytes(b"one")
    stored = store.put("dev", "job-2", 1, "ckpt.pt", io.BytesIO(source.read_bytes()))
    target = tmp_path / "resume" / "ckpt.pt"
    with pytest.raises(ArtifactChecksumError, match="recorded checkpoint has sha256 0{64}"):
        store.fetch("dev", stored.uri, "0" * 64, target)
    assert list(target.parent.iterdir()) == []


def test_each_tenant_writes_and_reads_only_its_own_prefix(
    store: S3Store, object_store: PrivateStore, tmp_path: Path
):
    source = tmp_path / "f"
    source.write_text("x")
    stored = store.put("other", "job-3", 1, "out.txt", io.BytesIO(source.read_bytes()))
    # The dev agent credential cannot read other's object even when asked directly.
    dev = object_store.credentials.tenants["dev"].agent
    assert dev is not None
    with pytest.raises(ObjectStoreError, match="AccessDenied"):
        s3client.download(
            s3client.make_client(object_store.settings, dev),
            ObjectRef.parse(stored.uri),
            tmp_path / "stolen",
            stored.sha256,
        )
    with pytest.raises(ArtifactStoreError, match="not an object of tenant 'dev'"):
        store.fetch("dev", stored.uri, stored.sha256, tmp_path / "stolen")


def test_a_tenant_without_credentials_gets_an_error_naming_the_file(
    store: S3Store, object_store: PrivateStore, tmp_path: Path
):
    source = tmp_path / "f"
    source.write_text("x")
    with pytest.raises(ArtifactStoreError, match="no 'agent' S3 credential for tenant 'nobody'"):
        store.put("nobody", "job-4", 1, "out.txt", io.BytesIO(source.read_bytes()))


@pytest.mark.parametrize("size", [10, s3client.PART_BYTES + 1])
def test_a_confined_file_goes_up_from_its_descriptor(
    store: S3Store, object_store: PrivateStore, tmp_path: Path, size: int
):
    (tmp_path / "ckpt").mkdir()
    data = os.urandom(size)
    (tmp_path / "ckpt" / "step_1.pt").write_bytes(data)
    caps = Caps(file_bytes=size, job_bytes=size)
    stored = put_confined(store, "dev", "job-6", 1, tmp_path, "ckpt/step_1.pt", caps, 0, 60)
    assert (stored.bytes, stored.sha256) == (size, hashlib.sha256(data).hexdigest())
    assert object_store.read(stored.uri) == data


def test_keys_never_leave_the_job_prefix():
    assert object_key("a/b", "../j", 1, "./x/y.pt") == "tenants/a_b/jobs/.._j/attempts/1/x/y.pt"
    with pytest.raises(ObjectStoreError, match="without '..'"):
        object_key("dev", "j", 1, "../../etc/passwd")


@pytest.mark.parametrize(
    ("name", "step"),
    [("step_1200.pt", 1200), ("ckpt-0003.bin", 3), ("epoch2/step20", 20), ("latest.pt", None)],
)
def test_checkpoint_step(name: str, step: int | None):
    assert checkpoint_step(name) == step
