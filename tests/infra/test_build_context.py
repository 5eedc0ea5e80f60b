"""The services image's build context, as the Docker daemon receives it (``.dockerignore``).

docker-compose sends the repository to the daemon once for every service built from
./Dockerfile; without ``.dockerignore`` that was the venv, the local stack's home (broker
and Postgres data, the weed binary), git and the caches, over a gigabyte each time. The
test builds a one-step image from the real context on the real daemon and lists it.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest

from services.settings import Settings
from tests.conftest import require_stack

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LISTING = "context:"


def copied_by_the_dockerfile() -> set[str]:
    """The first path of every COPY of ./Dockerfile (its last word is the target)."""
    sources: set[str] = set()
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources.update(line.split()[1:-1])
    return sources


def test_the_context_holds_what_the_image_copies_and_nothing_else(settings: Settings) -> None:
    require_stack(settings)
    tag = f"gridledger-context-check-{uuid.uuid4().hex[:8]}:latest"
    dockerfile = (
        "FROM gridledger/busybox:latest\nCOPY . /context\n"
        f"RUN du -sk /context && for p in /context/* /context/.*; do echo {LISTING}$p; done\n"
    )
    try:
        built = subprocess.run(
            ["docker", "build", "--no-cache", "--network", "none", "-t", tag, "-f", "-", str(REPO)],
            input=dockerfile, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)
    names = {
        line.removeprefix(LISTING + "/context/")
        for line in built.stdout.splitlines()
        if line.startswith(LISTING + "/context/")
    } - {".", "..", ".*"}
    assert names == copied_by_the_dockerfile(), "the context differs from what the image copies"
    size = re.search(r"^(\d+)\s+/context$", built.stdout, re.MULTILINE)
    assert size is not None, built.stdout[-3000:]
    kilobytes = int(size.group(1))
    # The sources alone (a few MB); a venv or a stack home in it would be hundreds.
    assert kilobytes < 50_000, f"the build context is {kilobytes} kB"
