"""The object store's binary: a home takes the one its cache holds, a builder that waited for
another finds the binary made, and setup's background build runs on the system python3 alone.
(The compile itself, minutes long, runs in `dev up`, which CI does on a fresh machine.)"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
from pathlib import Path

import pytest

from infra import weed

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


def kept_binary(cache: Path) -> Path:
    """A stand-in weed in the cache, as an earlier clone's build leaves it."""
    kept = cache / "seaweedfs" / weed.VERSION / "weed"
    kept.parent.mkdir(parents=True)
    kept.write_text("#!/bin/sh\necho weed\n")
    kept.chmod(0o755)
    weed.stamp_of(kept).write_text(weed.VERSION + "\n")
    return kept


def no_compile(*args: object) -> None:
    raise AssertionError("compiled although the binary was at hand")


def test_a_fresh_home_takes_the_cached_binary_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weed, "_compile", no_compile)
    kept = kept_binary(tmp_path / "cache")
    binary = tmp_path / "home" / "bin" / "weed"
    log = tmp_path / "home" / "logs" / "seaweedfs-build.log"
    assert weed.build(binary, log, tmp_path / "cache") is True
    assert weed.cached(binary) and binary.read_bytes() == kept.read_bytes()
    assert weed.build(binary, log, tmp_path / "cache") is False, "ready already"


def test_a_builder_that_waited_for_the_lock_finds_the_binary_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weed, "_compile", no_compile)
    binary = tmp_path / "home" / "bin" / "weed"
    binary.parent.mkdir(parents=True)
    results: list[bool] = []
    with open(binary.with_name("weed.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # setup's background build, still compiling
        waiter = threading.Thread(
            target=lambda: results.append(weed.build(binary, tmp_path / "build.log", tmp_path))
        )
        waiter.start()
        weed._install(kept_binary(tmp_path / "elsewhere"), binary)  # ... and done
    waiter.join(timeout=60)
    assert results == [False] and weed.cached(binary)


@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no system python3 here")
def test_setups_background_build_runs_on_the_system_python_alone(tmp_path: Path) -> None:
    kept_binary(tmp_path / "cache")
    done = subprocess.run(
        [SYSTEM_PYTHON, "-I", str(ROOT / "infra" / "weed.py"), "--home", str(tmp_path / "h")],
        env={"PATH": os.environ["PATH"], "GRIDLEDGER_CACHE": str(tmp_path / "cache")},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"weed {weed.VERSION}: copied from the cache in")
    assert weed.cached(tmp_path / "h" / "bin" / "weed")
