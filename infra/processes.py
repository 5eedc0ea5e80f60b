"""Detached background processes tracked by pid files.

The stack's daemons (the Kafka broker, dockerd) must outlive the ``gridledger
dev up`` command that started them, so they run in their own session with
their output appended to a log file, and their pid goes to a pid file. A pid
file alone is not proof: the process may be gone, a zombie (PID 1 in some
containers never reaps orphans) or a different process that reused the pid,
so liveness also checks the state and the command line in ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def is_alive(pid: int, cmdline_marker: str | None = None) -> bool:
    """True when ``pid`` runs, is not a zombie and its command line contains the marker."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    proc = Path("/proc") / str(pid)
    try:
        # The state follows the parenthesised command name, which may contain spaces.
        state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        if state in {"Z", "X"}:
            return False
        if cmdline_marker is not None:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            return cmdline_marker in cmdline
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return True  # no /proc to look at: trust the signal check
    return True


def read_pid(pid_file: Path) -> int | None:
    """The pid stored in ``pid_file``, or None when it is missing or unreadable."""
    try:
        return int(pid_file.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def running_pid(pid_file: Path, cmdline_marker: str | None = None) -> int | None:
    """The pid from ``pid_file`` when that process is alive (see :func:`is_alive`)."""
    pid = read_pid(pid_file)
    if pid is not None and is_alive(pid, cmdline_marker):
        return pid
    return None


def start_detached(
    args: Sequence[str],
    *,
    log_file: Path,
    pid_file: Path | None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``args`` in a new session, output appended to ``log_file``; write its pid file.

    ``pid_file=None`` for programs that write their own (``dockerd -p``).
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            list(args),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    if pid_file is not None:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{process.pid}\n")
    return process.pid


def stop(pid: int, *, timeout: float = 30.0, cmdline_marker: str | None = None) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL. True if it was running."""
    if not is_alive(pid, cmdline_marker):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_alive(pid):
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        _reap(pid)
        if not is_alive(pid):
            break
        time.sleep(0.1)
    return True


def _reap(pid: int) -> None:
    # Only succeeds for our own children (a broker started by this same process, as in tests).
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, for error messages; empty if there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
