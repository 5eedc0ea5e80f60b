"""The local S3-compatible object store: SeaweedFS's ``weed server -s3`` (Apache-2.0).

The binary is built once into ``<home>/bin/weed`` (:mod:`infra.weed`, which
``infra/setup.sh`` starts first, in the background) and reused by every later
``dev up``.

Layout under ``<home>/seaweedfs``: ``data/`` (volumes, filer and master
metadata), ``s3.json`` (the S3 identities, derived from the credentials file)
and ``weed.pid``. Output goes to ``<home>/logs/seaweedfs.log``. Every server
binds 127.0.0.1 only: S3 on ``s3_port``, master, volume and filer on the next
three ports, each gRPC port at +10000.

The credentials file (``<home>/s3-credentials.json``, see
services/objectstore.py) is written once, like the API tokens: one ``agent``
and one ``reader`` identity per tenant, each limited to ``tenants/<tenant>/``
of the bucket, and an ``admin`` identity ``dev up`` uses to create the bucket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import processes, tokens, weed
from infra.status import ComponentStatus
from schemas.errors import StackError
from services import objectstore
from services.objectstore import Credential, CredentialsFile, ObjectStoreError, TenantCredentials
from services.private_files import write_private
from services.settings import Settings

VOLUME_SIZE_MB = 1024
"""Volumes are small (SeaweedFS's default is 30 GB each, seven per bucket)."""


@dataclass(frozen=True)
class SeaweedPaths:
    """Where the local object store keeps its binary, data, S3 configuration, pid and log."""

    root: Path
    data: Path
    s3_config: Path
    pid_file: Path
    log: Path
    binary: Path
    stamp: Path

    @classmethod
    def of(cls, settings: Settings) -> SeaweedPaths:
        """The paths of the settings' home."""
        root = settings.home / "seaweedfs"
        binary = settings.weed_binary or settings.home / "bin" / "weed"
        return cls(
            root=root,
            data=root / "data",
            s3_config=root / "s3.json",
            pid_file=root / "weed.pid",
            log=settings.logs_dir / "seaweedfs.log",
            binary=binary,
            stamp=weed.stamp_of(binary),
        )


@dataclass(frozen=True)
class Ports:
    """The object store's ports, all derived from ``s3_port`` so one setting moves them together."""

    s3: int
    master: int
    volume: int
    filer: int

    @classmethod
    def of(cls, settings: Settings) -> Ports:
        """The ports of the settings' ``s3_port``."""
        base = settings.s3_port
        return cls(s3=base, master=base + 1, volume=base + 2, filer=base + 3)

    def all(self) -> list[int]:
        """Every port the server binds: the HTTP ports and their gRPC ports (+10000)."""
        http = [self.s3, self.master, self.volume, self.filer]
        return http + [p + 10000 for p in http]


# ---------------------------------------------------------------------- the binary


def binary_cached(settings: Settings) -> bool:
    """Whether the pinned version of the binary is already in the home (no build needed)."""
    return weed.cached(SeaweedPaths.of(settings).binary)


def build_binary(settings: Settings) -> bool:
    """Make ``<home>/bin/weed`` the pinned version (:func:`infra.weed.build`: waits for a
    build ``infra/setup.sh`` started). False when it was there already."""
    try:
        return weed.build(
            SeaweedPaths.of(settings).binary, settings.logs_dir / "seaweedfs-build.log"
        )
    except weed.BuildError as exc:
        raise StackError(str(exc)) from exc


# ---------------------------------------------------------------------- credentials


def _new_credential(name: str) -> Credential:
    return Credential(
        access_key=f"gl{name}{secrets.token_hex(6)}", secret_key=secrets.token_hex(20)
    )


def ensure_credentials(settings: Settings) -> bool:
    """Write the credentials file, or add the tenants of the tokens file it lacks.

    Existing credentials are never changed (running agents and the API hold them).
    Returns True when the file changed.
    """
    path = settings.s3_credentials_path
    current = CredentialsFile.load(path) if path.is_file() else CredentialsFile()
    wanted = sorted(tokens.tenants(settings) | set(tokens.TENANTS))
    tenants = dict(current.tenants)
    for tenant in wanted:
        entry = tenants.get(tenant, TenantCredentials())
        tenants[tenant] = entry.model_copy(
            update={
                "agent": entry.agent or _new_credential("agent"),
                "reader": entry.reader or _new_credential("reader"),
            }
        )
    updated = CredentialsFile(admin=current.admin or _new_credential("admin"), tenants=tenants)
    if updated == current and path.is_file():
        return False
    write_private(path, updated.model_dump_json(indent=2, exclude_none=True) + "\n")
    return True


def render_s3_config(settings: Settings, creds: CredentialsFile) -> dict[str, Any]:
    """SeaweedFS's ``-s3.config``: one identity per credential, scoped by tenant prefix.

    Actions are ``Action:bucket/key-pattern``; anything not listed is denied and
    there is no anonymous identity.
    """
    bucket = settings.s3_bucket
    identities: list[dict[str, Any]] = []
    if creds.admin is not None:
        identities.append(_identity("admin", creds.admin, ["Admin", "Read", "List", "Write"]))
    for tenant, entry in sorted(creds.tenants.items()):
        scope = f"{bucket}/{objectstore.tenant_prefix(tenant)}*"
        if entry.agent is not None:
            identities.append(
                _identity(f"agent-{tenant}", entry.agent, [f"Write:{scope}", f"Read:{scope}"])
            )
        if entry.reader is not None:
            identities.append(_identity(f"reader-{tenant}", entry.reader, [f"Read:{scope}"]))
    return {"identities": identities}


def _identity(name: str, cred: Credential, actions: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "credentials": [{"accessKey": cred.access_key, "secretKey": cred.secret_key}],
        "actions": actions,
    }


def write_s3_config(settings: Settings, target: Path | None = None) -> bool:
    """Write SeaweedFS's identities (default ``<home>/seaweedfs/s3.json``) from the
    credentials file; True when the content changed."""
    target = target or SeaweedPaths.of(settings).s3_config
    text = json.dumps(
        render_s3_config(settings, CredentialsFile.load(settings.s3_credentials_path)), indent=2
    )
    if target.is_file() and target.read_text() == text:
        return False
    write_private(target, text)  # it holds every credential's secret key
    return True


# ---------------------------------------------------------------------- the server


def server_args(settings: Settings) -> list[str]:
    """The command line of an all-in-one server bound to 127.0.0.1 only, with S3 and its
    configuration."""
    paths = SeaweedPaths.of(settings)
    ports = Ports.of(settings)
    return [
        str(paths.binary),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        # No usage statistics sent anywhere, no IAM API beside S3 (identities come from
        # -s3.config only), no buckets created implicitly.
        "-master.telemetry=false",
        "-s3.iam=false",
        "-s3.autoCreateBucket=false",
        f"-dir={paths.data}",
        f"-master.port={ports.master}",
        f"-master.volumeSizeLimitMB={VOLUME_SIZE_MB}",
        f"-volume.port={ports.volume}",
        "-volume.max=0",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={ports.filer}",
        "-s3",
        f"-s3.port={ports.s3}",
        f"-s3.config={paths.s3_config}",
        # Catalog servers of the S3 gateway that gridledger does not use; 0 = not started.
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]


def running_pid(settings: Settings) -> int | None:
    """The pid of the server this home started, if it still runs (a recycled pid is not taken for
    it)."""
    paths = SeaweedPaths.of(settings)
    return processes.running_pid(paths.pid_file, f"-dir={paths.data}")


def start(settings: Settings) -> int:
    """Start the server in its own session and return its pid; a StackError names a port already
    taken."""
    paths = SeaweedPaths.of(settings)
    busy = [p for p in Ports.of(settings).all() if processes.port_open("127.0.0.1", p)]
    if busy:
        raise StackError(
            f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use by a process this "
            f"gridledger home did not start ({paths.pid_file} names no running SeaweedFS); stop "
            "it or choose another base port with GRIDLEDGER_S3_PORT (the object store uses it, "
            "the next three ports and each of them + 10000)"
        )
    paths.data.mkdir(parents=True, exist_ok=True)
    # The master pre-grows 7 volumes for a new bucket by default; 2 make the first write
    # of a fresh store quick and are plenty for one bucket on one machine.
    env = {**os.environ, "WEED_MASTER_VOLUME_GROWTH_COPY_1": "2"}
    return processes.start_detached(
        server_args(settings), log_file=paths.log, pid_file=paths.pid_file, cwd=paths.root, env=env
    )


async def wait_ready(settings: Settings, timeout: float = 120.0, pid: int | None = None) -> None:
    """Wait until the S3 gateway accepts the admin credential and the bucket exists."""
    from services import s3client

    paths = SeaweedPaths.of(settings)
    creds = CredentialsFile.load(settings.s3_credentials_path)
    if creds.admin is None:
        raise StackError(f"{settings.s3_credentials_path} has no admin credential to check with")
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if pid is not None and not processes.is_alive(pid):
            raise StackError(
                f"SeaweedFS (pid {pid}) exited while starting; see {paths.log}:\n"
                f"{processes.log_tail(paths.log)}"
            )
        if processes.port_open("127.0.0.1", settings.s3_port):
            try:
                await asyncio.to_thread(s3client.ensure_bucket, settings, creds.admin)
            except ObjectStoreError as exc:
                last_error = exc
            else:
                return
        await asyncio.sleep(0.5)
    raise StackError(
        f"the S3 gateway on {settings.s3_url} did not serve bucket {settings.s3_bucket!r} within "
        f"{timeout:.0f} s (last error: {last_error}); see {paths.log}"
    )


def status(settings: Settings) -> ComponentStatus:
    """Whether the S3 gateway serves; an external one (``GRIDLEDGER_S3_ENDPOINT``) is reported,
    never managed."""
    paths = SeaweedPaths.of(settings)
    if settings.s3_endpoint:
        return ComponentStatus(
            name="s3",
            running=True,
            address=f"{settings.s3_endpoint} bucket {settings.s3_bucket}",
            detail="external (GRIDLEDGER_S3_ENDPOINT); not managed by dev up",
        )
    pid = running_pid(settings)
    return ComponentStatus(
        name="s3",
        running=pid is not None and processes.port_open("127.0.0.1", settings.s3_port),
        address=f"{settings.s3_url} bucket {settings.s3_bucket} (SeaweedFS)",
        pid=pid,
        log=paths.log,
        started_by_us=pid is not None,
        detail="" if pid is not None else "not running",
    )


async def up(settings: Settings, timeout: float = 120.0) -> ComponentStatus:
    """Build the binary once, write the identities, start the server unless it runs."""
    began = time.monotonic()
    if settings.s3_endpoint:
        return status(settings)
    await asyncio.to_thread(ensure_credentials, settings)
    config_changed = await asyncio.to_thread(write_s3_config, settings)
    pid = running_pid(settings)
    if pid is not None and not config_changed:
        await wait_ready(settings, timeout, pid)
        return _with_detail(settings, "already running, bucket answered")
    steps = []
    if pid is not None:
        # SeaweedFS reads -s3.config at start: new tenants need a restart.
        await asyncio.to_thread(down, settings)
        steps.append("restarted for new identities")
    built = await asyncio.to_thread(build_binary, settings)
    steps.insert(0, "binary built" if built else "binary cached")
    pid = await asyncio.to_thread(start, settings)
    await wait_ready(settings, timeout, pid)
    steps.append(f"started and ready in {time.monotonic() - began:.1f} s")
    return _with_detail(settings, ", ".join(steps))


def down(settings: Settings) -> ComponentStatus:
    """Stop the server this home started; an external store is left alone."""
    paths = SeaweedPaths.of(settings)
    if settings.s3_endpoint:
        return status(settings)
    pid = running_pid(settings)
    if pid is None:
        paths.pid_file.unlink(missing_ok=True)
        return _with_detail(settings, "was not running")
    processes.stop(pid, timeout=30, cmdline_marker=f"-dir={paths.data}")
    paths.pid_file.unlink(missing_ok=True)
    return _with_detail(settings, f"stopped pid {pid}")


def _with_detail(settings: Settings, detail: str) -> ComponentStatus:
    return dataclasses.replace(status(settings), detail=detail)
