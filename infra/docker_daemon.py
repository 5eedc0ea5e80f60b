"""The Docker daemon: use the one that answers, start ``dockerd`` only when none does.

A daemon we start is recorded in ``<home>/docker/started-by-gridledger`` so that
``dev down`` stops it and never one that was running before ``dev up``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from infra import processes
from infra.status import ComponentStatus
from schemas.errors import StackError
from services.settings import Settings

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class DockerPaths:
    """Where a dockerd that `dev up` starts keeps its state, pid and log, under the home."""

    root: Path
    pid_file: Path
    """Written by dockerd itself (``-p``)."""
    marker: Path
    """Written by ``dev up`` with the pid of the dockerd it started; absent otherwise."""
    log: Path

    @classmethod
    def of(cls, settings: Settings) -> DockerPaths:
        """The paths of the settings' home."""
        root = settings.home / "docker"
        return cls(
            root=root,
            pid_file=root / "dockerd.pid",
            marker=root / "started-by-gridledger",
            log=settings.logs_dir / "dockerd.log",
        )


def address(settings: Settings) -> str:
    """The daemon's socket: ``docker_host``, else ``DOCKER_HOST``, else the default one."""
    return settings.docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


@contextmanager
def client(settings: Settings, timeout: int = 60) -> Iterator[docker.DockerClient]:
    """A Docker SDK client for the settings' daemon (``docker_host``, else the environment)."""
    c = docker.DockerClient(base_url=address(settings), timeout=timeout)
    try:
        yield c
    finally:
        c.close()


def ping(settings: Settings) -> bool:
    """True when a daemon answers ``/_ping`` at the settings' address."""
    try:
        with client(settings, timeout=5) as c:
            return bool(c.ping())
    except (DockerException, OSError):
        return False


def _our_pid(settings: Settings) -> int | None:
    return processes.running_pid(DockerPaths.of(settings).marker, "dockerd")


def _foreign_pid() -> int | None:
    """Best effort: the pid of a dockerd this home did not start, for ``dev status``."""
    pid = processes.running_pid(Path("/var/run/docker.pid"), "dockerd")
    if pid is not None:
        return pid
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() == "dockerd":
                return int(proc.name)
        except OSError:
            continue
    return None


def status(settings: Settings) -> ComponentStatus:
    """Whether the daemon answers, and whether `dev up` started it (only then does `dev down` stop
    it)."""
    paths = DockerPaths.of(settings)
    ours = _our_pid(settings)
    answering = ping(settings)
    return ComponentStatus(
        name="docker",
        running=answering,
        address=address(settings),
        pid=ours if ours is not None else (_foreign_pid() if answering else None),
        log=paths.log if ours is not None else None,
        started_by_us=ours is not None,
        detail="" if answering else "no daemon answers",
    )


def start(settings: Settings) -> int:
    """Start ``dockerd`` detached and mark it as ours. Needs root."""
    paths = DockerPaths.of(settings)
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise StackError(
            f"no Docker daemon answers at {address(settings)} and dockerd is not installed; "
            "install it with `apt-get install docker.io`"
        )
    if os.geteuid() != 0:
        raise StackError(
            f"no Docker daemon answers at {address(settings)}; start one "
            "(`sudo systemctl start docker` or `sudo dockerd`) or run `gridledger dev up` as root"
        )
    args = [dockerd, "-p", str(paths.pid_file)]
    if address(settings) != DEFAULT_SOCKET:
        args += ["-H", address(settings)]
    paths.root.mkdir(parents=True, exist_ok=True)
    pid = processes.start_detached(args, log_file=paths.log, pid_file=None)
    paths.marker.write_text(f"{pid}\n")
    return pid


async def wait_ready(settings: Settings, pid: int, timeout: float = 60.0) -> None:
    """Until the daemon answers a ping; a StackError with its log tail if it exits or takes too
    long."""
    log = DockerPaths.of(settings).log
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not processes.is_alive(pid):
            raise StackError(
                f"dockerd (pid {pid}) exited while starting; see {log}:\n{processes.log_tail(log)}"
            )
        if await asyncio.to_thread(ping, settings):
            return
        await asyncio.sleep(0.3)
    raise StackError(
        f"dockerd did not answer at {address(settings)} within {timeout:.0f} s; see {log}"
    )


async def up(settings: Settings) -> ComponentStatus:
    """Use the daemon that answers, or start one."""
    began = time.monotonic()
    if await asyncio.to_thread(ping, settings):
        current = status(settings)
        whose = "started by gridledger" if current.started_by_us else "already running, reused"
        return _with_detail(current, f"{whose}, answered ping")
    DockerPaths.of(settings).marker.unlink(missing_ok=True)
    pid = await asyncio.to_thread(start, settings)
    await wait_ready(settings, pid)
    return _with_detail(status(settings), f"started and ready in {time.monotonic() - began:.1f} s")


def down(settings: Settings) -> ComponentStatus:
    """Stop dockerd only when this home's ``dev up`` started it."""
    paths = DockerPaths.of(settings)
    pid = _our_pid(settings)
    if pid is None:
        paths.marker.unlink(missing_ok=True)
        current = status(settings)
        detail = "not started by gridledger, left running" if current.running else "not running"
        return _with_detail(current, detail)
    processes.stop(pid, timeout=30, cmdline_marker="dockerd")
    paths.marker.unlink(missing_ok=True)
    paths.pid_file.unlink(missing_ok=True)
    return _with_detail(status(settings), f"stopped pid {pid}")


def _with_detail(current: ComponentStatus, detail: str) -> ComponentStatus:
    return dataclasses.replace(current, detail=detail)
