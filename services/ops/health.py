"""``gridledger health``: every service's liveness, readiness, checks and lag at a glance.

The services come from the supervisor's state file (``<home>/run/fleet.json``,
written by ``gridledger run`` and ``gridledger demo``) and/or ``--url
NAME=URL`` pairs (any ops server, e.g. a systemd-run service on a known port).
Each one is asked ``/healthz`` and ``/readyz`` concurrently. The exit status is
0 only when every service is ready. The table is the CLI's (``services.cli.fleet``):
this module answers with rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.errors import GridledgerError
from services.ops.supervisor import fetch_json, supervisor_alive


@dataclass(frozen=True)
class Target:
    """A service to ask for its health: its name, ops URL and what the supervisor says of it."""

    name: str
    ops_url: str | None
    state: str = ""
    """The supervisor's word for it (running, backoff, stopped, failed); '' when unknown."""
    pid: int | None = None
    restarts: int = 0


def state_file(home: Path) -> Path:
    """The supervisor's state file (its services, their pids and ops ports) in the home."""
    return home / "run" / "fleet.json"


def targets_from_state(path: Path) -> tuple[list[Target], bool]:
    """The services a supervisor's state file lists, and whether that supervisor runs."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return [], False
    except (OSError, ValueError) as exc:
        raise GridledgerError(f"cannot read the supervisor's state file {path}: {exc}") from exc
    running = supervisor_alive(path) is not None
    targets = [
        Target(
            s["name"],
            s.get("ops_url"),
            s.get("state", "") if running else "stopped (no supervisor)",
            s.get("pid") if running else None,
            int(s.get("restarts", 0)),
        )
        for s in data.get("services", [])
    ]
    return targets, running


def parse_urls(pairs: Sequence[str]) -> list[Target]:
    """``name=url`` pairs given on the command line; a ValueError names a malformed one."""
    targets = []
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise GridledgerError(
                f"--url {pair!r} is not NAME=URL; e.g. --url sink=http://127.0.0.1:8602"
            )
        targets.append(Target(name, url.rstrip("/")))
    return targets


def probe(target: Target, timeout_s: float) -> dict[str, Any]:
    """One service's row: up, ready, its checks and its lag."""
    row: dict[str, Any] = {
        "name": target.name,
        "state": target.state,
        "pid": target.pid,
        "restarts": target.restarts,
        "ops_url": target.ops_url,
        "up": False,
        "ready": False,
        "lag": None,
        "checks": [],
    }
    if target.ops_url is None:
        row["error"] = "no ops port (ops_port: 0)"
        return row
    alive = fetch_json(f"{target.ops_url}/healthz", timeout_s)
    row["up"] = bool(alive and alive.get("alive"))
    if alive and alive.get("pid"):
        row["pid"] = alive["pid"]
    ready = fetch_json(f"{target.ops_url}/readyz", timeout_s + 3) if row["up"] else None
    if ready is None:
        row["error"] = "does not answer" if not row["up"] else "/readyz does not answer"
        return row
    row["ready"] = bool(ready.get("ready"))
    row["checks"] = ready.get("checks", [])
    lags = [c.get("lag") for c in row["checks"] if c.get("name") == "lag"]
    row["lag"] = lags[0] if lags else None
    return row


def collect(targets: Sequence[Target], timeout_s: float = 3.0) -> list[dict[str, Any]]:
    """Ask every target at once (threads: one slow service must not delay the others' answers)."""
    if not targets:
        return []
    with ThreadPoolExecutor(min(16, len(targets))) as pool:
        return list(pool.map(lambda t: probe(t, timeout_s), targets))


def report(
    home: Path, urls: Sequence[str], timeout_s: float = 3.0, state: Path | None = None
) -> dict[str, Any]:
    """``{ready, supervisor, services: [row]}`` for the state file's services and ``urls``."""
    path = state or state_file(home)
    targets, running = targets_from_state(path)
    targets += parse_urls(urls)
    if not targets:
        raise GridledgerError(
            f"no services to ask: {path} does not exist (start the set with `gridledger run`) "
            "and no --url NAME=URL was given"
        )
    rows = collect(targets, timeout_s)
    return {"ready": all(r["ready"] for r in rows), "supervisor": running, "services": rows}
