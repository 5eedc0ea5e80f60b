"""Filesystem artifact store, checkpoint step parsing and the failing-store hook."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from services.agent.artifacts import (
    FailingStore,
    FilesystemStore,
    checkpoint_step,
    file_from_uri,
)
from services.agent.errors import ArtifactStoreError


def test_store_copies_with_sha256_under_job_and_attempt(tmp_path: Path):
    source = tmp_path / "src.bin"
    source.write_bytes(b"weights" * 1000)
    store = FilesystemStore(tmp_path / "artifacts")
    stored = store.put("job-1", 2, "ckpt/step_10.pt", source)
    target = tmp_path / "artifacts" / "job-1" / "2" / "ckpt" / "step_10.pt"
    assert stored.uri == target.as_uri()
    assert file_from_uri(stored.uri) == target
    assert stored.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert stored.bytes == 7000 and target.read_bytes() == source.read_bytes()


def test_store_failure_is_an_artifact_store_error(tmp_path: Path):
    store = FilesystemStore(tmp_path / "artifacts")
    with pytest.raises(ArtifactStoreError):
        store.put("job-1", 1, "missing.pt", tmp_path / "nope")


def test_failing_store_fails_only_matching_paths(tmp_path: Path):
    source = tmp_path / "f"
    source.write_text("x")
    store = FailingStore(FilesystemStore(tmp_path / "a"), "model.*")
    with pytest.raises(ArtifactStoreError, match="test hook"):
        store.put("j", 1, "model.pt", source)
    assert store.put("j", 1, "metrics.json", source).bytes == 1


@pytest.mark.parametrize(
    ("name", "step"),
    [("step_1200.pt", 1200), ("ckpt-0003.bin", 3), ("epoch2/step20", 20), ("latest.pt", None)],
)
def test_checkpoint_step(name: str, step: int | None):
    assert checkpoint_step(name) == step
