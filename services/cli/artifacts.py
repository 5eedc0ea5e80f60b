"""``gridledger outputs JOB`` and ``gridledger download JOB [PATH] [-d DIR]``.

Both go through the API: the listing is what the job's history says it stored,
and each download uses a short-lived URL the API signs for the job's tenant,
so the CLI never holds object-store credentials. Every downloaded file is
checked against the sha256 recorded when it was stored.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

import click

from schemas.errors import GridledgerError
from services.cli import render
from services.cli.client import ApiClient
from services.cli.exits import CliError, Exit
from services.cli.options import Connection, Output, api_options, complete_job, output_options

_CHUNK = 1024 * 1024


def size(n: int) -> str:
    """A byte count for people, in the largest unit (up to GiB) that keeps it readable."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def listing_text(data: dict[str, Any], clock: render.Clock) -> str:
    """The table of `gridledger outputs`: each stored output and checkpoint with its size, digest
    and attempt."""
    found = data.get("artifacts", [])
    if not found:
        return f"{data['job_id']} stored no outputs or checkpoints"
    rows = [
        [
            a["kind"],
            a["path"],
            a["attempt"],
            size(a["bytes"]),
            a["sha256"][:12],
            clock.format(a["stored_at"], "%Y-%m-%d %H:%M"),
            clock.format(a["expires_at"], "%Y-%m-%d %H:%M"),
        ]
        for a in found
    ]
    headers = ["KIND", "PATH", "ATT", "SIZE", "SHA256", clock.header("STORED"), "EXPIRES"]
    return (
        render.table(headers, rows)
        + f"\nkept {data['retention_days']} days after they were stored; "
        f"`gridledger download {data['job_id']} [PATH]` fetches them"
    )


def latest_per_path(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per path: the latest attempt that stored it (a retry stores outputs anew)."""
    best: dict[str, dict[str, Any]] = {}
    for a in found:
        if a["path"] not in best or a["attempt"] >= best[a["path"]]["attempt"]:
            best[a["path"]] = a
    return list(best.values())


def select(
    data: dict[str, Any], path: str | None, attempt: int | None, checkpoints: bool
) -> list[dict[str, Any]]:
    """What ``download`` fetches: PATH (of ATTEMPT or the latest), else every output."""
    job = data["job_id"]
    found = [a for a in data.get("artifacts", []) if attempt is None or a["attempt"] == attempt]
    if path is not None:
        chosen = latest_per_path([a for a in found if a["path"] == path])
        if not chosen:
            which = f" in attempt {attempt}" if attempt is not None else ""
            raise CliError(
                f"job {job} stored no {path}{which}; `gridledger outputs {job}` lists what it "
                "stored",
                Exit.NOT_FOUND,
            )
        return chosen
    kinds = {"output", "checkpoint"} if checkpoints else {"output"}
    chosen = latest_per_path([a for a in found if a["kind"] in kinds])
    if not chosen:
        what = "outputs or checkpoints" if checkpoints else "outputs"
        hint = "" if checkpoints else " (add --checkpoints for its checkpoints)"
        raise CliError(f"job {job} stored no {what}{hint}", Exit.NOT_FOUND)
    return chosen


def fetch(url: str, target: Path, sha256: str) -> int:
    """Stream ``url`` to ``target`` and check its sha256; nothing is left behind on failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with urllib.request.urlopen(url, timeout=60) as reply, partial.open("wb") as out:
            while block := reply.read(_CHUNK):
                digest.update(block)
                written += len(block)
                out.write(block)
        if digest.hexdigest() != sha256:
            raise GridledgerError(
                f"{target.name}: the downloaded bytes have sha256 {digest.hexdigest()}, the job "
                f"recorded {sha256}; the stored object is not the one the job wrote (not saved)"
            )
        os.replace(partial, target)
    except urllib.error.HTTPError as exc:
        raise GridledgerError(
            f"the object store refused the download of {target.name} (HTTP {exc.code}: "
            f"{exc.read()[:300].decode(errors='replace')})"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise GridledgerError(f"downloading {target.name} failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return written


def download_all(
    client: ApiClient, job: str, chosen: list[dict[str, Any]], out_dir: Path
) -> list[tuple[dict[str, Any], Path]]:
    """Fetch each chosen artifact under ``out_dir`` (its path kept), sha256-verified; return where
    each went."""
    done = []
    for a in chosen:
        parts = PurePosixPath(a["path"]).parts
        if not parts or ".." in parts or PurePosixPath(a["path"]).is_absolute():
            raise GridledgerError(f"refusing to write {a['path']!r} outside {out_dir}")
        query = urllib.parse.urlencode({"path": a["path"], "attempt": a["attempt"]})
        signed = client.get(f"/v1/jobs/{job}/artifacts/url?{query}")
        target = out_dir.joinpath(*parts)
        fetch(signed["url"], target, signed["sha256"])
        done.append((a, target))
    return done


@click.command("outputs")
@click.argument("job", shell_complete=complete_job)
@api_options
@output_options
def outputs(conn: Connection, out: Output, job: str) -> int:
    """The outputs and checkpoints JOB stored: size, sha256, attempt, and until when kept."""
    out.emit(conn.client.get(f"/v1/jobs/{job}/artifacts"), lambda d: listing_text(d, out.clock))
    return 0


@click.command("download")
@click.argument("job", shell_complete=complete_job)
@click.argument("path", required=False)
@click.option(
    "-d",
    "--dir",
    "--output-dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="folder to write into (PATH's folders are kept under it)",
)
@click.option("--attempt", type=int, help="of this attempt (default: the latest that stored it)")
@click.option("--checkpoints", is_flag=True, help="without PATH: the checkpoints too")
@api_options
@output_options
def download(
    conn: Connection,
    out: Output,
    job: str,
    path: str | None,
    out_dir: Path,
    attempt: int | None,
    checkpoints: bool,
) -> int:
    """Download JOB's outputs, or its stored PATH (as `gridledger outputs JOB` lists it).

    Each file is verified against the sha256 the job recorded when it was stored.
    """
    chosen = select(conn.client.get(f"/v1/jobs/{job}/artifacts"), path, attempt, checkpoints)
    done = [
        {"path": a["path"], "attempt": a["attempt"], "bytes": a["bytes"], "file": str(target)}
        for a, target in download_all(conn.client, job, chosen, out_dir)
    ]
    out.emit(
        done,
        lambda files: "\n".join(
            f"{f['file']}  ({size(f['bytes'])}, attempt {f['attempt']}, sha256 verified)"
            for f in files
        ),
    )
    return 0


COMMANDS = (outputs, download)
