"""Where checkpoints and outputs are kept: an interface and a filesystem store.

The filesystem store keeps ``<root>/<job>/<attempt>/<path>`` (``root`` is
``<home>/artifacts``) and returns ``file://`` URIs. The store is an interface so
S3-compatible stores can follow; :class:`FailingStore` is the test hook that
makes chosen paths fail for real (the "outputs failed to store" scenario).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

from services.agent.errors import ArtifactStoreError
from services.ops import metrics

_CHUNK = 1024 * 1024
_TRAILING_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class StoredArtifact:
    uri: str
    sha256: str
    bytes: int


class ArtifactStore(Protocol):
    def put(self, job_id: str, attempt: int, path: str, source: Path) -> StoredArtifact:
        """Store ``source`` as ``path`` of the attempt; raise ArtifactStoreError on failure."""
        ...


def checkpoint_step(name: str) -> int | None:
    """The step a checkpoint name carries: the last number in its file name without suffix.

    ``step_1200.pt`` → 1200, ``ckpt-0003.bin`` → 3, ``epoch2/step20`` → 20, ``latest.pt`` → None.
    """
    stem = Path(name).name.split(".", 1)[0]
    match = _TRAILING_NUMBER.search(stem)
    return int(match.group(1)) if match else None


class FilesystemStore:
    """Artifacts as files under ``root``; writes go to a temporary name, then rename."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, job_id: str, attempt: int, path: str, source: Path) -> StoredArtifact:
        target = self.root / _safe(job_id) / str(attempt) / path
        if not target.resolve().is_relative_to(self.root.resolve()):
            raise ArtifactStoreError(f"artifact path {path!r} leaves the store")
        digest = hashlib.sha256()
        size = 0
        tmp = target.with_name(f".{target.name}.partial")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                raise ArtifactStoreError(
                    f"{path} is a folder; declare the files in it as outputs "
                    "(folders are not stored)"
                )
            with source.open("rb") as src, tmp.open("wb") as dst:
                while block := src.read(_CHUNK):
                    digest.update(block)
                    size += len(block)
                    dst.write(block)
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ArtifactStoreError(f"storing {path} to {target} failed: {exc}") from exc
        return StoredArtifact(uri=target.resolve().as_uri(), sha256=digest.hexdigest(), bytes=size)


class FailingStore:
    """Wraps a store; paths matching ``pattern`` fail as an unreachable store would."""

    def __init__(self, inner: ArtifactStore, pattern: str) -> None:
        self.inner = inner
        self.pattern = pattern

    def put(self, job_id: str, attempt: int, path: str, source: Path) -> StoredArtifact:
        if fnmatch.fnmatch(path, self.pattern):
            raise ArtifactStoreError(
                f"storing {path} failed: the artifact store refused it "
                f"(test hook GRIDLEDGER_AGENT_ARTIFACT_FAIL_GLOB={self.pattern!r})"
            )
        return self.inner.put(job_id, attempt, path, source)


class MeteredStore:
    """Wraps a store; counts the bytes it stored (``gridledger_upload_bytes``)."""

    def __init__(self, inner: ArtifactStore) -> None:
        self.inner = inner

    def put(self, job_id: str, attempt: int, path: str, source: Path) -> StoredArtifact:
        stored = self.inner.put(job_id, attempt, path, source)
        metrics.UPLOAD_BYTES.inc(stored.bytes)
        return stored


def file_from_uri(uri: str) -> Path:
    """The local path of a ``file://`` URI (the only scheme this store writes)."""
    if not uri.startswith("file://"):
        raise ArtifactStoreError(f"cannot read {uri!r}: only file:// artifacts are supported here")
    return Path(unquote(urlparse(uri).path))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "_"


_SKIPPED_SUFFIXES = (".tmp", ".partial", ".part", ".swp")


def list_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Files under ``folder`` → (size, mtime_ns); hidden and temporary files are skipped."""
    found: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return found
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or path.name.endswith(_SKIPPED_SUFFIXES):
            continue
        with contextlib.suppress(OSError):
            if path.is_file():
                st = path.stat()
                found[rel.as_posix()] = (st.st_size, st.st_mtime_ns)
    return found
