"""The local S3-compatible object store: SeaweedFS's ``weed server -s3`` (Apache-2.0).

SeaweedFS is a Go module with ``replace`` directives, so ``go install`` refuses
it; ``go mod download -json`` of the pinned version, a writable copy of its
``Dir`` and ``go build ./weed`` inside it works. The binary is built once into
``<home>/bin/weed`` (a stamp file names the version it was built from) and
reused by every later ``dev up``; the source copy is deleted afterwards.

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
import shutil
import subprocess
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import processes, tokens
from infra.status import ComponentStatus
from schemas.errors import StackError
from services import objectstore
from services.objectstore import Credential, CredentialsFile, ObjectStoreError, TenantCredentials
from services.private_files import write_private
from services.settings import Settings

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
GO_MIN = (1, 21)
"""Oldest Go that fetches the toolchain SeaweedFS's go.mod asks for by itself (GOTOOLCHAIN)."""
GO_TOOLCHAIN = "go1.26.8"
"""Toolchain fetched from the Go module proxy when no usable ``go`` is installed
(Debian 12 ships Go 1.19); SeaweedFS at :data:`VERSION` needs Go >= 1.26.6."""
BUILD_TIMEOUT_S = 3600
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
            stamp=binary.with_name("weed.version"),
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
    """Whether the pinned version of the binary is already in the home (no download needed)."""
    paths = SeaweedPaths.of(settings)
    try:
        return os.access(paths.binary, os.X_OK) and paths.stamp.read_text().strip() == VERSION
    except OSError:
        return False


def _go_version(go: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    parts = out.stdout.strip().removeprefix("go").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def _proxy() -> str:
    first = os.environ.get("GOPROXY", "https://proxy.golang.org").split(",")[0].split("|")[0]
    return first if first.startswith("http") else "https://proxy.golang.org"


def find_go(settings: Settings) -> str:
    """A ``go`` new enough to build SeaweedFS; fetch the toolchain module when there is none.

    The toolchain comes from the Go module proxy as the module
    ``golang.org/toolchain`` (what ``go`` itself does with ``GOTOOLCHAIN``).
    """
    fetched = settings.home / "toolchain" / GO_TOOLCHAIN / "bin" / "go"
    for go in (shutil.which("go"), "/usr/local/go/bin/go", str(fetched)):
        if go and os.access(go, os.X_OK) and (_go_version(go) or (0, 0)) >= GO_MIN:
            return go
    return fetch_toolchain(settings)


def fetch_toolchain(settings: Settings) -> str:
    """Download :data:`GO_TOOLCHAIN` from the Go module proxy into ``<home>/toolchain``."""
    fetched = settings.home / "toolchain" / GO_TOOLCHAIN / "bin" / "go"
    version = f"v0.0.1-{GO_TOOLCHAIN}.linux-amd64"
    url = f"{_proxy()}/golang.org/toolchain/@v/{version}.zip"
    target = fetched.parent.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            archive = Path(scratch) / "toolchain.zip"
            with urllib.request.urlopen(url, timeout=120) as reply, archive.open("wb") as out:
                shutil.copyfileobj(reply, out)
            with zipfile.ZipFile(archive) as z:
                z.extractall(scratch)
            inner = Path(scratch) / f"golang.org/toolchain@{version}"
            for tool in (inner / "bin").iterdir():
                tool.chmod(0o755)
            for tool in (inner / "pkg" / "tool").rglob("*"):
                if tool.is_file():
                    tool.chmod(0o755)
            shutil.rmtree(target, ignore_errors=True)
            inner.rename(target)
    except (OSError, zipfile.BadZipFile) as exc:
        raise StackError(
            f"no Go >= {GO_MIN[0]}.{GO_MIN[1]} is installed and fetching {url} failed: {exc}; "
            "install Go (https://go.dev/dl) or make the Go module proxy reachable"
        ) from exc
    return str(fetched)


def _run(args: list[str], cwd: Path, env: dict[str, str], what: str, log: Path) -> str:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(args)}  (in {cwd})\n".encode())
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    with open(log, "ab") as out:
        out.write((result.stderr or "").encode())
    if result.returncode != 0:
        raise StackError(
            f"{what} failed (exit {result.returncode}); see {log}:\n"
            f"{(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return result.stdout


def build_binary(settings: Settings) -> bool:
    """Build ``<home>/bin/weed`` from the pinned module version. False when already cached."""
    paths = SeaweedPaths.of(settings)
    if binary_cached(settings):
        return False
    go = find_go(settings)
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log = settings.logs_dir / "seaweedfs-build.log"
    paths.binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "auto", "GOFLAGS": "-mod=mod"}
    with tempfile.TemporaryDirectory(prefix="weed-build-", dir=paths.binary.parent) as scratch:
        listing = _run(
            [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
            Path(scratch),
            env,
            f"go mod download {MODULE}@{VERSION}",
            log,
        )
        try:
            module_dir = Path(json.loads(listing)["Dir"])
        except (json.JSONDecodeError, KeyError) as exc:
            raise StackError(
                f"`go mod download -json` printed no module Dir: {listing[-500:]}"
            ) from exc
        source = Path(scratch) / "src"
        # The module cache is read-only; the build writes into the module tree.
        shutil.copytree(module_dir, source, symlinks=True)
        for folder, _, files in os.walk(source):
            os.chmod(folder, 0o755)
            for name in files:
                path = Path(folder) / name
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode | 0o200)
        partial = paths.binary.with_name("weed.partial")
        _run([go, "build", "-o", str(partial), "./weed"], source, env, "go build ./weed", log)
        partial.replace(paths.binary)
    paths.stamp.write_text(VERSION + "\n")
    return True


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
