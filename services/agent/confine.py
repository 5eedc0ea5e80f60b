"""A job's files, opened without ever leaving the job's own output folder.

Everything under ``$GRIDLEDGER_OUTPUT_DIR`` was written by the job, so every
name, link, size and file type there is hostile. An output or checkpoint is
opened one path component at a time, relative to the folder the agent
created, with ``O_NOFOLLOW`` on each (``O_DIRECTORY`` for the folders on the
way), and the leaf with ``O_NOFOLLOW | O_NONBLOCK``; what was opened is then
judged by ``fstat`` of that descriptor, never by a stat of the path first. Only
a regular file within the caps is stored, read from the descriptor that was
checked. Everything else is an :class:`ArtifactRefusedError` whose ``reason`` is
the one OutputFailed records and whose message names the path and the rule:

| reason | what the job wrote or declared |
|---|---|
| ``refused_link`` | the file, or a folder on its path, is a symbolic link (never followed) |
| ``refused_special_file`` | a FIFO, socket or device |
| ``refused_folder`` | a folder (``.`` included): declare each file of it as an output |
| ``refused_outside`` | a path with ``..`` or an absolute path |
| ``refused_unreadable`` | a file the agent may not read (its permissions) |
| ``over_file_cap`` | larger than ``max_output_file_bytes`` (refused before any byte is read) |
| ``over_job_cap`` | would take the attempt past ``max_output_job_bytes`` |
| ``over_checkpoint_count`` | past ``max_checkpoint_files`` of the attempt (then not watched) |

Reads are bounded too: :class:`BoundedReader` returns at most the size
``fstat`` reported and raises once its deadline has passed, so a file that
stops delivering data cannot hold an upload thread.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.agent.errors import (
    AgentError,
    ArtifactMissingError,
    ArtifactRefusedError,
    ArtifactStoreError,
)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_BLOCK = 1024 * 1024

MAX_LISTED = 10_000
"""Entries a checkpoint listing looks at, at most (a job can create millions)."""
MAX_DEPTH = 16
"""Folder levels a checkpoint listing descends, at most."""


@dataclass(frozen=True)
class Caps:
    """The size caps of one attempt's stored files."""

    file_bytes: int
    job_bytes: int


def gib(n: int) -> str:
    """A byte count the way the refusals quote it."""
    if n >= 1024**5:
        return f"{n / 1024**5:.1f} PiB"
    if n >= 1024**3:
        return f"{n / 1024**3:.1f} GiB"
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n} bytes"


def _parts(path: str) -> list[str]:
    if path.startswith("/"):
        raise ArtifactRefusedError(
            path, "refused_outside", f"'{path}' is absolute; outputs are relative to "
            "$GRIDLEDGER_OUTPUT_DIR"
        )  # fmt: skip
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArtifactRefusedError(
            path, "refused_outside", f"'{path}' contains '..'; an output never leaves "
            "$GRIDLEDGER_OUTPUT_DIR"
        )  # fmt: skip
    return parts


def _refusal_for(path: str, name: str, dir_fd: int, exc: OSError) -> AgentError:
    """Why opening ``name`` in ``dir_fd`` failed, told from an lstat (the refusal is already
    decided; this only names it)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return ArtifactMissingError(f"'{path}' does not exist")
    except OSError:
        st = None
    if exc.errno == errno.ELOOP or (st is not None and stat.S_ISLNK(st.st_mode)):
        where = "is" if name == Path(path).name else f"has the link '{name}' on its path, which"
        return ArtifactRefusedError(
            path, "refused_link", f"'{path}' {where} a symbolic link; links are never followed"
        )
    if exc.errno == errno.ENOTDIR:
        return ArtifactMissingError(f"'{path}' does not exist ('{name}' is not a folder)")
    if exc.errno == errno.EACCES:
        return ArtifactRefusedError(
            path, "refused_unreadable", f"'{path}' may not be read (permission denied)"
        )
    if exc.errno == errno.ENXIO:
        return ArtifactRefusedError(
            path, "refused_special_file", f"'{path}' is a socket; only regular files are stored"
        )
    return ArtifactStoreError(f"opening '{path}' failed: {exc}")


def _walk(root: Path, path: str, parts: list[str]) -> int:
    """A descriptor of the folder holding the last of ``parts`` (of ``root`` itself when
    ``parts`` is empty), every component opened without following links."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal_for(path, name, fd, exc) from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_regular(path: str, st: os.stat_result) -> None:
    """Refuse anything ``fstat`` says is not a regular file."""
    if stat.S_ISDIR(st.st_mode):
        raise ArtifactRefusedError(
            path, "refused_folder", f"'{path or '.'}' is a folder; folders are not stored: declare "
            "each file in it as an output"
        )  # fmt: skip
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactRefusedError(
            path, "refused_special_file", f"'{path}' is {_kind(st.st_mode)}; only regular files "
            "are stored"
        )  # fmt: skip


def check_size(path: str, size: int, caps: Caps, used: int) -> None:
    """Refuse a file over the per-file cap, or one that takes the attempt over its total."""
    if size > caps.file_bytes:
        raise ArtifactRefusedError(
            path, "over_file_cap", f"'{path}' is {gib(size)}; the per-file cap is "
            f"{gib(caps.file_bytes)} (max_output_file_bytes)"
        )  # fmt: skip
    if used + size > caps.job_bytes:
        raise ArtifactRefusedError(
            path, "over_job_cap", f"'{path}' ({gib(size)}) takes the attempt's stored files to "
            f"{gib(used + size)}; the per-attempt cap is {gib(caps.job_bytes)} "
            "(max_output_job_bytes)"
        )  # fmt: skip


@contextmanager
def open_artifact(
    root: Path, path: str, caps: Caps, used: int = 0, deadline_s: float = 60.0
) -> Iterator[io.BufferedReader[BoundedReader]]:
    """Open ``path`` under ``root`` as a (buffered) :class:`BoundedReader` of its checked
    bytes.

    Raises:
        ArtifactRefusedError: the job's file may not be stored (see the module's table).
        ArtifactMissingError: nothing is at ``path``.
        ArtifactStoreError: the agent's own failure to open it.
    """
    parts = _parts(path)
    folder = _walk(root, path, parts[:-1])
    try:
        if not parts:
            st = os.fstat(folder)
            check_regular(path, st)
        try:
            fd = os.open(parts[-1], _LEAF_FLAGS, dir_fd=folder)
        except OSError as exc:
            raise _refusal_for(path, parts[-1], folder, exc) from exc
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        check_regular(path, st)
        check_size(path, st.st_size, caps, used)
        reader = BoundedReader(fd, path, st, time.monotonic() + deadline_s)
    except BaseException:
        os.close(fd)
        raise
    with io.BufferedReader(reader, _BLOCK) as buffered:
        yield buffered


class BoundedReader(io.RawIOBase):
    """The bytes of an opened regular file: at most ``size`` of them, before ``deadline``.

    Seekable (an upload reads it twice: to hash, then to send), and every read
    checks the deadline, so a slow file never holds the thread past it.
    """

    def __init__(self, fd: int, path: str, opened: os.stat_result, deadline: float) -> None:
        super().__init__()
        self.fd = fd
        self.path = path
        self.opened = opened
        self.size = opened.st_size
        self.deadline = deadline
        self._pos = 0
        self._last: os.stat_result | None = None

    def changed(self) -> bool:
        """Whether the file was written since it was opened (its ctime, which no job can set
        back, or its size moved): the bytes read may not be the ones hashed. Answers after a
        close too (an upload library may close what it read)."""
        now = self._last or os.fstat(self.fd)
        return (now.st_ctime_ns, now.st_size) != (self.opened.st_ctime_ns, self.opened.st_size)

    def readable(self) -> bool:
        """Always."""
        return True

    def seekable(self) -> bool:
        """Always (the position is the reader's own; reads are ``pread``)."""
        return True

    def tell(self) -> int:
        """The position."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move within ``[0, size]``."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, min(self.size, base + offset))
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` (short only at the end of the file), a block at a time."""
        want = min(len(buffer), self.size - self._pos)
        done = 0
        while done < want:
            if time.monotonic() > self.deadline:
                raise ArtifactStoreError(
                    f"reading '{self.path}' did not finish within its deadline"
                )
            data = os.pread(self.fd, min(want - done, _BLOCK), self._pos)
            if not data:
                break  # shorter than fstat said: what is there is what is stored
            buffer[done : done + len(data)] = data
            done += len(data)
            self._pos += len(data)
        return done

    def close(self) -> None:
        """Close the descriptor (once), keeping its last fstat for :meth:`changed`."""
        if not self.closed:
            self._last = os.fstat(self.fd)
            os.close(self.fd)
        super().close()


def list_files(root: Path, folder: str, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """Everything but folders under ``folder`` of ``root`` → its (size, mtime_ns), from lstat.

    Links are listed, never followed and never descended into, so a store of
    one is refused with its reason; hidden names and names ending in ``skip``
    are left out. A ``folder`` that is (or passes through) a link raises
    ArtifactRefusedError; a missing one lists nothing. At most :data:`MAX_LISTED`
    entries and :data:`MAX_DEPTH` levels are looked at.
    """
    try:
        top = _walk(root, folder, _parts(folder))
    except ArtifactMissingError:
        return {}
    found: dict[str, tuple[int, int]] = {}
    seen = 0
    stack: list[tuple[int, str, int]] = [(top, "", 0)]
    try:
        while stack:
            fd, prefix, depth = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > MAX_LISTED:
                            return found
                        if entry.name.startswith(".") or entry.name.endswith(skip):
                            continue
                        rel = f"{prefix}{entry.name}"
                        st = entry.stat(follow_symlinks=False)
                        if stat.S_ISDIR(st.st_mode):
                            if depth + 1 < MAX_DEPTH:
                                try:
                                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                                except OSError:
                                    continue
                                stack.append((child, f"{rel}/", depth + 1))
                            continue
                        found[rel] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return found
