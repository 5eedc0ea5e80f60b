"""Local test images, built on this machine; nothing is pulled from a registry.

- ``gridledger/busybox:latest``: ``FROM scratch`` plus Debian's busybox-static
  (``infra/images/busybox/Dockerfile``).
- ``gridledger/python:latest``: a Debian bookworm minbase with ``python3``,
  made by debootstrap and ``docker import``; the root filesystem tarball is
  cached in ``<home>/images/`` so a rebuild after ``docker rmi`` takes seconds.
  (``python3-minimal`` alone lacks json, asyncio and dataclasses, which any
  real job script imports.)

Each image carries labels naming what it was built from; an image whose
labels differ from :data:`LABELS` is rebuilt, so changing the recipe here is
enough to refresh every machine on its next ``dev up``.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from docker.errors import BuildError, DockerException, ImageNotFound

from infra import docker_daemon
from infra.status import ComponentStatus
from schemas.errors import StackError
from services.settings import Settings

BUSYBOX_IMAGE = "gridledger/busybox:latest"
PYTHON_IMAGE = "gridledger/python:latest"
IMAGES = (BUSYBOX_IMAGE, PYTHON_IMAGE)
CONTEXTS = Path(__file__).parent / "images"
BUSYBOX_BINARY = Path("/bin/busybox")
SUITE = "bookworm"
PYTHON_PACKAGES = "python3"
ROOTFS = f"python-{SUITE}-minbase-{PYTHON_PACKAGES.replace(',', '-')}"
LABELS = {
    BUSYBOX_IMAGE: {"org.gridledger.image": "busybox"},
    PYTHON_IMAGE: {"org.gridledger.image": "python", "org.gridledger.rootfs": ROOTFS},
}
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TRIMMED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
"""Folders of the rootfs no job needs; removing them keeps the image near 60 MB."""


def present(settings: Settings) -> dict[str, bool]:
    """Which of :data:`IMAGES` the daemon has, built from the current recipe."""
    found = {}
    with docker_daemon.client(settings) as c:
        for name in IMAGES:
            try:
                labels = c.images.get(name).labels or {}
            except ImageNotFound:
                labels = {}
            found[name] = all(labels.get(k) == v for k, v in LABELS[name].items())
    return found


def build_busybox(settings: Settings) -> None:
    """Build :data:`BUSYBOX_IMAGE` from the Dockerfile and the host's static busybox."""
    if not BUSYBOX_BINARY.is_file():
        raise StackError(
            f"{BUSYBOX_BINARY} is missing; install it with `apt-get install busybox-static`"
        )
    with tempfile.TemporaryDirectory(prefix="gl-busybox-") as context:
        shutil.copyfile(CONTEXTS / "busybox" / "Dockerfile", Path(context) / "Dockerfile")
        shutil.copy2(BUSYBOX_BINARY, Path(context) / "busybox")
        try:
            with docker_daemon.client(settings, timeout=300) as c:
                c.images.build(path=context, tag=BUSYBOX_IMAGE, rm=True, pull=False)
        except (BuildError, DockerException) as exc:
            raise StackError(f"building {BUSYBOX_IMAGE} failed: {exc}") from exc


def python_rootfs(settings: Settings) -> Path:
    """The cached rootfs tarball for :data:`PYTHON_IMAGE`, made with debootstrap if missing."""
    images_dir = settings.home / "images"
    tarball = images_dir / f"{ROOTFS}.tar"
    if tarball.is_file():
        return tarball
    if shutil.which("debootstrap") is None:
        raise StackError(
            "debootstrap is not installed; install it with `apt-get install debootstrap`"
        )
    images_dir.mkdir(parents=True, exist_ok=True)
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log = settings.logs_dir / "debootstrap.log"
    rootfs = images_dir / "python-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    with open(log, "ab") as out:
        result = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={PYTHON_PACKAGES}",
                SUITE,
                str(rootfs),
                settings.debian_mirror,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if result.returncode != 0:
        shutil.rmtree(rootfs, ignore_errors=True)
        raise StackError(
            f"debootstrap of {SUITE} from {settings.debian_mirror} failed (exit "
            f"{result.returncode}); it needs root and a reachable Debian mirror "
            f"(GRIDLEDGER_DEBIAN_MIRROR); see {log}"
        )
    for folder in TRIMMED:
        shutil.rmtree(rootfs / folder, ignore_errors=True)
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    partial = tarball.with_suffix(".partial")
    with open(partial, "wb") as out:
        subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=out, check=True
        )
    partial.rename(tarball)
    shutil.rmtree(rootfs, ignore_errors=True)
    return tarball


def build_python(settings: Settings) -> None:
    """Import :data:`PYTHON_IMAGE` from the (cached) debootstrap rootfs."""
    tarball = python_rootfs(settings)
    repository, _, tag = PYTHON_IMAGE.partition(":")
    try:
        with docker_daemon.client(settings, timeout=300) as c:
            c.api.import_image_from_file(
                str(tarball),
                repository=repository,
                tag=tag,
                changes=[
                    'CMD ["python3"]',
                    f"ENV {PATH_ENV}",
                    "ENV LANG=C.UTF-8",
                    *(f'LABEL {k}="{v}"' for k, v in LABELS[PYTHON_IMAGE].items()),
                ],
            )
    except DockerException as exc:
        raise StackError(f"docker import of {tarball} as {PYTHON_IMAGE} failed: {exc}") from exc


def smoke_test(settings: Settings, image: str, command: list[str]) -> str:
    """Run ``command`` once in ``image`` (no network) and return its output."""
    try:
        with docker_daemon.client(settings) as c:
            output = c.containers.run(image, command, remove=True, network_disabled=True)
    except DockerException as exc:
        raise StackError(f"{image} was built but does not run {command}: {exc}") from exc
    return output.decode(errors="replace").strip() if isinstance(output, bytes) else ""


def status(settings: Settings) -> ComponentStatus:
    """Whether every local image `dev up` builds is present."""
    try:
        found = present(settings)
    except DockerException:
        return ComponentStatus(name="images", running=False, detail="docker daemon unreachable")
    return ComponentStatus(
        name="images",
        running=all(found.values()),
        address=", ".join(
            f"{name} {'present' if ok else 'missing or outdated'}" for name, ok in found.items()
        ),
    )


def _image_id(settings: Settings, name: str) -> str | None:
    with docker_daemon.client(settings) as c:
        try:
            return str(c.images.get(name).id)
        except ImageNotFound:
            return None


def _remove_if_untagged(settings: Settings, image_id: str | None) -> None:
    """Drop the image a rebuild replaced, unless it is still tagged or used by a container."""
    if image_id is None:
        return
    with docker_daemon.client(settings) as c:
        try:
            if not c.images.get(image_id).tags:
                c.images.remove(image_id)
        except DockerException:
            pass  # in use or already gone: leaving it costs only disk


def up(settings: Settings) -> ComponentStatus:
    """Build the images that are missing or outdated, then run each new one once."""
    began = time.monotonic()
    found = present(settings)
    recipes = (
        (BUSYBOX_IMAGE, build_busybox, ["true"]),
        (PYTHON_IMAGE, build_python, ["python3", "-c", "import json, asyncio; print('ok')"]),
    )
    built = []
    for name, build, smoke_command in recipes:
        if found[name]:
            continue
        previous = _image_id(settings, name)
        build(settings)
        smoke_test(settings, name, smoke_command)
        _remove_if_untagged(settings, previous)
        built.append(name)
    current = status(settings)
    if built:
        detail = f"built {', '.join(built)} in {time.monotonic() - began:.1f} s"
    else:
        detail = "already present"
    return dataclasses.replace(current, detail=detail)
