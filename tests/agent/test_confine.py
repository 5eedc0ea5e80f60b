"""Opening a job's files without leaving its output folder: every hostile shape is refused
with its reason, from the opened descriptor, before a byte is read."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from services.agent.confine import Caps, list_files, open_artifact
from services.agent.errors import (
    ArtifactMissingError,
    ArtifactRefusedError,
    ArtifactStoreError,
)

CAPS = Caps(file_bytes=1024 * 1024, job_bytes=2 * 1024 * 1024)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    root = tmp_path / "job" / "output"
    root.mkdir(parents=True)
    (tmp_path / "secret.json").write_text('{"token": "theirs"}')
    return root


def refusal(root: Path, path: str, caps: Caps = CAPS, used: int = 0) -> ArtifactRefusedError:
    with pytest.raises(ArtifactRefusedError) as info, open_artifact(root, path, caps, used):
        pass
    assert info.value.path == path
    return info.value


def test_a_regular_file_is_read_from_the_opened_descriptor(out: Path) -> None:
    (out / "sub").mkdir()
    (out / "sub" / "model.pt").write_bytes(b"weights" * 100)
    with open_artifact(out, "sub/model.pt", CAPS) as f:
        assert f.read() == b"weights" * 100
        f.seek(0)
        assert f.read(7) == b"weights"


@pytest.mark.parametrize(
    "target", ["/etc/passwd", "../../secret.json", "/dev/zero", "/nonexistent"]
)
def test_a_link_is_refused_whatever_it_points_to(out: Path, target: str) -> None:
    os.symlink(target, out / "t.json")
    r = refusal(out, "t.json")
    assert r.reason == "refused_link" and "symbolic link" in r.message and "'t.json'" in r.message


def test_a_link_anywhere_on_the_path_is_refused(out: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-job" / "output"
    other.mkdir(parents=True)
    (other / "model.pt").write_text("another job's weights")
    os.symlink(other, out / "ckpt")
    r = refusal(out, "ckpt/model.pt")
    assert r.reason == "refused_link" and "'ckpt'" in r.message
    with pytest.raises(ArtifactRefusedError, match="refused_link"):
        list_files(out, "ckpt")


def test_dot_dot_and_absolute_paths_never_leave_the_folder(out: Path) -> None:
    assert refusal(out, "../secret.json").reason == "refused_outside"
    assert refusal(out, "/etc/passwd").reason == "refused_outside"


@pytest.mark.parametrize("path", [".", "", "sub", "sub/"])
def test_a_declared_folder_is_refused(out: Path, path: str) -> None:
    (out / "sub").mkdir()
    assert refusal(out, path).reason == "refused_folder"


def test_a_fifo_is_refused_without_blocking(out: Path) -> None:
    os.mkfifo(out / "pipe")
    started = time.monotonic()
    r = refusal(out, "pipe")
    assert r.reason == "refused_special_file" and "FIFO" in r.message
    assert time.monotonic() - started < 30  # it returned at all: a blocking open never would


def test_a_socket_is_refused(out: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(out / "sock"))
        assert refusal(out, "sock").reason == "refused_special_file"
    finally:
        sock.close()


def sparse(path: Path) -> int:
    """A sparse file of 1 PiB, or of the largest size the file system allows (ext4: 16 TiB)."""
    for size in (1024**5, 15 * 1024**4, 1024**4):
        try:
            with open(path, "wb") as f:
                f.truncate(size)
        except OSError:
            continue
        return size
    raise AssertionError("no sparse file could be made")


def test_a_sparse_petabyte_is_refused_from_its_size_alone(out: Path) -> None:
    sparse(out / "huge.bin")
    r = refusal(out, "huge.bin")
    assert r.reason == "over_file_cap"
    assert "is 1" in r.message and "max_output_file_bytes" in r.message


def test_the_attempt_total_is_capped(out: Path) -> None:
    (out / "b.bin").write_bytes(b"x" * 1024)
    r = refusal(out, "b.bin", used=CAPS.job_bytes - 10)
    assert r.reason == "over_job_cap" and "max_output_job_bytes" in r.message


def test_missing_is_not_a_refusal(out: Path) -> None:
    (out / "file").write_text("x")
    for path in ("nothing.pt", "dir/nothing.pt", "file/below"):
        with pytest.raises(ArtifactMissingError), open_artifact(out, path, CAPS):
            pass


def test_reads_stop_at_the_deadline(out: Path) -> None:
    (out / "slow.bin").write_bytes(b"x" * 10)
    with (
        pytest.raises(ArtifactStoreError, match="deadline"),
        open_artifact(out, "slow.bin", CAPS, deadline_s=-1) as f,
    ):
        f.read()


def test_reads_never_go_past_the_checked_size(out: Path) -> None:
    (out / "grows.bin").write_bytes(b"a" * 10)
    with open_artifact(out, "grows.bin", CAPS) as f:
        with open(out / "grows.bin", "ab") as more:
            more.write(b"b" * 10_000)
        assert f.read() == b"a" * 10


def test_listing_checkpoints_lists_links_but_never_follows_or_descends(
    out: Path, tmp_path: Path
) -> None:
    ckpt = out / "ckpt"
    (ckpt / "epoch1").mkdir(parents=True)
    (ckpt / "epoch1" / "step_10.pt").write_bytes(b"10")
    (ckpt / "step_20.pt").write_bytes(b"20")
    (ckpt / ".hidden").write_text("x")
    (ckpt / "step_30.pt.tmp").write_text("x")
    os.symlink(tmp_path, ckpt / "host")  # a folder link: listed as an entry, not descended
    os.symlink("/etc/passwd", ckpt / "passwd")
    listing = list_files(out, "ckpt", skip=(".tmp",))
    assert sorted(listing) == ["epoch1/step_10.pt", "host", "passwd", "step_20.pt"]
    assert listing["step_20.pt"][0] == 2
    assert list_files(out, "absent") == {}


def test_a_file_written_while_it_is_read_is_told_apart(out: Path) -> None:
    (out / "ckpt.pt").write_bytes(b"one")
    with open_artifact(out, "ckpt.pt", CAPS) as f:
        assert not f.raw.changed()
        f.read()
        # A rewrite moves the ctime (at the kernel's clock tick) and here the size too.
        (out / "ckpt.pt").write_bytes(b"three")
        assert f.raw.changed()
