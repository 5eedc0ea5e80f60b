"""Build SeaweedFS's ``weed`` binary, the local object store (standard library only).

SeaweedFS is a Go module with ``replace`` directives, so ``go install`` refuses it;
``go mod download -json`` of the pinned version, a writable copy of its ``Dir`` and
``go build ./weed`` inside it works. The binary goes to ``<home>/bin/weed`` with a
``weed.version`` stamp beside it naming the version it was built from.

The build is lean (:func:`make_lean`): the local stack runs only ``weed server`` with its
master, volume server, filer and S3 gateway (``infra/seaweedfs.py``), so the copy's
``weed/weed.go`` is replaced by ``infra/weed-lean/weed.go``, ``weed/command`` keeps only
:data:`LEAN_COMMAND_FILES` and the plugins nothing configures (other filer stores,
notification queues, credential stores and KMS) are not linked in.

It is the longest step of a first run (minutes of compiling), so ``infra/setup.sh``
starts it first, in the background, before the Debian packages, the venv and the
images (``python3 infra/weed.py --home HOME``: this file needs no package of the
venv), and ``dev up`` (``infra.seaweedfs.up``) waits for that build instead of
starting a second one: builders take the lock ``<binary>.lock`` in turn, and the
one that gets it second finds the binary built.

What can be kept between clones is kept under the user's cache folder
(``$GRIDLEDGER_CACHE``, default ``~/.cache/gridledger``): the Go toolchain fetched
when none is installed, Go's module and build caches, and each built binary by
version, which a fresh clone's home then copies instead of building.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
GO_MIN = (1, 21)
"""Oldest Go that fetches the toolchain SeaweedFS's go.mod asks for by itself (GOTOOLCHAIN)."""
GO_TOOLCHAIN = "go1.26.8"
"""Toolchain fetched from the Go module proxy when no usable ``go`` is installed
(Debian 12 ships Go 1.19); SeaweedFS at :data:`VERSION` needs Go >= 1.26.6."""
BUILD_TIMEOUT_S = 3600
BUILD_FLAGS = ("-trimpath", "-ldflags=-s -w")
"""No file paths and no symbol or debug tables in the binary: a smaller file, a quicker link."""

LEAN_SOURCES = Path(__file__).resolve().parent / "weed-lean"
"""The lean main (``weed.go``, in place of SeaweedFS's own) and ``imports.go`` (the filer
and credential stores it links)."""
LEAN_COMMANDS = ("cmdServer", "cmdMaster", "cmdVolume", "cmdFiler", "cmdS3", "cmdVersion")
"""The commands of the lean ``weed``: ``server`` and the four it starts, and ``version``."""
LEAN_COMMAND_FILES = frozenset(
    ("command.go", "shutdown.go", "version.go", "server.go", "master.go", "volume.go")
    + ("filer.go", "s3.go")
    # `weed server` declares the flags of its optional sftp, IAM, WebDAV and message
    # queue servers too (never started here), so their option types stay.
    + ("sftp.go", "iam.go", "webdav.go", "mq_broker.go", "mq_agent.go")
)
"""The files of ``weed/command`` the lean commands need (the rest, and its tests, go)."""
LEAN_PLUGIN_KINDS = ("filer", "notification", "credential", "kms")
"""Packages under ``weed/`` that register a plugin by a blank import ..."""
LEAN_PLUGINS_KEPT = frozenset(
    ("filer/leveldb2", "credential/filer_etc", "credential/memory", "kms/local")
)
"""... of which the lean build keeps these: the filer's default store (``leveldb2`` in its
``-dir``), the S3 identities file's credential stores and the local KMS."""


class BuildError(RuntimeError):
    """The binary could not be built; the message says which step and where its log is."""


def cache_dir() -> Path:
    """What is kept between clones: ``$GRIDLEDGER_CACHE``, default ``~/.cache/gridledger``."""
    return Path(os.environ.get("GRIDLEDGER_CACHE") or Path.home() / ".cache" / "gridledger")


def stamp_of(binary: Path) -> Path:
    """The file beside ``binary`` naming the version it was built from."""
    return binary.with_name("weed.version")


def cached(binary: Path) -> bool:
    """Whether ``binary`` is the pinned version, ready to run."""
    try:
        return os.access(binary, os.X_OK) and stamp_of(binary).read_text().strip() == VERSION
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


def find_go(cache: Path) -> str:
    """A ``go`` new enough to build SeaweedFS; fetch the toolchain module when there is none.

    The toolchain comes from the Go module proxy as the module ``golang.org/toolchain``
    (what ``go`` itself does with ``GOTOOLCHAIN``), into ``<cache>/toolchain``.
    """
    fetched = cache / "toolchain" / GO_TOOLCHAIN / "bin" / "go"
    for go in (shutil.which("go"), "/usr/local/go/bin/go", str(fetched)):
        if go and os.access(go, os.X_OK) and (_go_version(go) or (0, 0)) >= GO_MIN:
            return go
    return fetch_toolchain(fetched)


def fetch_toolchain(fetched: Path) -> str:
    """Download :data:`GO_TOOLCHAIN` from the Go module proxy so that ``fetched`` is its go."""
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
        raise BuildError(
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
        raise BuildError(
            f"{what} failed (exit {result.returncode}); see {log}:\n"
            f"{(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return result.stdout


def _compile(go: str, target: Path, cache: Path, log: Path) -> None:
    """``go build ./weed`` of the pinned module into ``target``, with Go's caches in ``cache``."""
    env = {
        **os.environ,
        "GOTOOLCHAIN": "auto",
        "GOFLAGS": "-mod=mod",
        "GOMODCACHE": str(cache / "go" / "mod"),
        "GOCACHE": str(cache / "go" / "build"),
        "GOPATH": str(cache / "go" / "path"),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="weed-build-", dir=target.parent) as scratch:
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
            raise BuildError(
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
        make_lean(source)
        partial = target.with_name("weed.partial")
        _run(
            [go, "build", *BUILD_FLAGS, "-o", str(partial), "./weed"],
            source,
            env,
            "go build ./weed",
            log,
        )
        partial.replace(target)
    stamp_of(target).write_text(VERSION + "\n")


_PLUGIN_KIND = "|".join(LEAN_PLUGIN_KINDS)
_BLANK_PLUGIN_IMPORT = re.compile(
    rf'^\s*_ "github\.com/seaweedfs/seaweedfs/weed/((?:{_PLUGIN_KIND})/[^"]+)".*\n', re.MULTILINE
)
_COMMANDS_LIST = re.compile(r"^var Commands = \[\]\*Command\{\n.*?^\}\n", re.MULTILINE | re.DOTALL)


def make_lean(source: Path) -> None:
    """Cut the writable copy ``source`` of the module down to the lean ``weed``.

    A step that no longer matches the pinned sources (a renamed file or list) raises
    :class:`BuildError` rather than building something else."""
    weed_dir = source / "weed"
    command = weed_dir / "command"
    for path in command.iterdir():
        if path.is_dir():
            shutil.rmtree(path)
        elif path.name not in LEAN_COMMAND_FILES:
            path.unlink()
    missing = sorted(LEAN_COMMAND_FILES - {p.name for p in command.iterdir()})
    commands = command / "command.go"
    text = commands.read_text() if commands.is_file() else ""
    lean_list = f"var Commands = []*Command{{{', '.join(LEAN_COMMANDS)}}}\n"
    text, replaced = _COMMANDS_LIST.subn(lean_list, text)
    if missing or replaced != 1:
        raise BuildError(
            f"the lean build does not fit {MODULE}@{VERSION}: weed/command lacks "
            f"{missing or 'the Commands list'}; update LEAN_COMMAND_FILES in infra/weed.py"
        )
    commands.write_text(text)
    shutil.copyfile(LEAN_SOURCES / "imports.go", command / "imports.go")
    shutil.copyfile(LEAN_SOURCES / "weed.go", weed_dir / "weed.go")
    for path in weed_dir.rglob("*.go"):
        if path.name.endswith("_test.go"):
            continue
        text = path.read_text()
        kept = _BLANK_PLUGIN_IMPORT.sub(
            lambda m: m.group(0) if m.group(1) in LEAN_PLUGINS_KEPT else "", text
        )
        if kept != text:
            path.write_text(kept)


def _install(source: Path, binary: Path) -> None:
    """Copy a built binary and its stamp into place (a partial copy never looks finished)."""
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name("weed.partial")
    shutil.copy2(source, partial)
    partial.replace(binary)
    stamp_of(binary).write_text(VERSION + "\n")


def build(binary: Path, log: Path, cache: Path | None = None) -> bool:
    """Make ``binary`` the pinned version: copied from the cache when it holds it, else
    built (and kept there). False when it was ready already, or another builder made it
    while this one waited for the lock."""
    if cached(binary):
        return False
    cache = cache or cache_dir()
    log.parent.mkdir(parents=True, exist_ok=True)
    binary.parent.mkdir(parents=True, exist_ok=True)
    with open(binary.with_name("weed.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another build of this home finishes first
        if cached(binary):
            return False
        kept = cache / "seaweedfs" / VERSION / "weed"
        if not cached(kept):
            _compile(find_go(cache), kept, cache, log)
        _install(kept, binary)
    return True


def main(argv: list[str]) -> int:
    """``python3 infra/weed.py --home HOME``: build ``HOME/bin/weed`` unless it is there."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="the stack's home folder")
    args = parser.parse_args(argv)
    home = args.home.resolve()
    began = time.monotonic()
    kept = cached(cache_dir() / "seaweedfs" / VERSION / "weed")
    try:
        built = build(home / "bin" / "weed", home / "logs" / "seaweedfs-build.log")
    except BuildError as exc:
        print(f"weed: {exc}", file=sys.stderr)
        return 1
    state = ("copied from the cache" if kept else "built") if built else "ready already"
    print(f"weed {VERSION}: {state} in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
