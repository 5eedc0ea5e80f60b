"""The object store's binary: a home takes the one its cache holds, a builder that waited for
another finds the binary made, setup's background build runs on the system python3 alone, and
the lean build's cut fits the pinned sources. (The compile itself, minutes long, runs in
`dev up`, which CI does on a fresh machine; the object store tests then run that binary.)"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
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


def pinned_sources() -> Path:
    """The pinned module in the Go module cache, as the build downloads it."""
    module = weed.cache_dir() / "go" / "mod" / f"{weed.MODULE}@{weed.VERSION}"
    if not (module / "weed" / "command").is_dir():
        from tests.conftest import in_ci

        message = f"{module} is not there; `gridledger dev up` downloads it with the build"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return module


def test_the_lean_build_fits_the_pinned_sources(tmp_path: Path) -> None:
    module = pinned_sources()
    source = tmp_path / "src"
    shutil.copytree(module / "weed" / "command", source / "weed" / "command")
    for package in ("server", "s3api"):  # where the plugins the build cuts are imported
        (source / "weed" / package).mkdir(parents=True)
        for path in (module / "weed" / package).glob("*.go"):
            shutil.copyfile(path, source / "weed" / package / path.name)
    for path in source.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    weed.make_lean(source)

    command = source / "weed" / "command"
    assert {p.name for p in command.iterdir()} == weed.LEAN_COMMAND_FILES | {"imports.go"}
    lists = re.findall(r"^var Commands = .*$", (command / "command.go").read_text(), re.M)
    assert lists == [f"var Commands = []*Command{{{', '.join(weed.LEAN_COMMANDS)}}}"]
    assert (source / "weed" / "weed.go").read_bytes() == (
        weed.LEAN_SOURCES / "weed.go"
    ).read_bytes()
    plugins = set()
    for path in source.rglob("*.go"):
        if not path.name.endswith("_test.go"):
            plugins |= set(weed._BLANK_PLUGIN_IMPORT.findall(path.read_text()))
    assert plugins == weed.LEAN_PLUGINS_KEPT, "a plugin nothing configures is still linked"
    # The full build's filer server registers every store: the cut took them out.
    original = (module / "weed" / "server" / "filer_server.go").read_text()
    assert "weed/filer/cassandra" in original
    assert "weed/filer/cassandra" not in (source / "weed/server/filer_server.go").read_text()


def test_a_lean_build_that_no_longer_fits_says_which_file_is_missing(tmp_path: Path) -> None:
    command = tmp_path / "src" / "weed" / "command"
    command.mkdir(parents=True)
    (command / "command.go").write_text("package command\n\nvar Commands = []*Command{\n}\n")
    with pytest.raises(weed.BuildError, match=r"weed/command lacks \[.*'server.go'"):
        weed.make_lean(tmp_path / "src")
