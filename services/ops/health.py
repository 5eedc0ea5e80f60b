"""``gridledger health``: every service's liveness, readiness, checks and lag at a glance.

The services come from the supervisor's state file (``<home>/run/fleet.json``,
written by ``gridledger run`` and ``gridledger demo``) and/or ``--url
NAME=URL`` pairs (any ops server, e.g. a systemd-run service on a known port).
Each one is asked ``/healthz`` and ``/readyz`` concurrently. The exit status is
0 only when every service is ready.
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


def render(rows: Sequence[dict[str, Any]]) -> str:
    """The `gridledger health` table: each service's state, readiness and failing checks."""
    from services.cli import render as cli_render

    table = []
    for row in rows:
        failing = [
            f"{c['name']}{'' if c.get('critical', True) else ' (degraded)'}: {c.get('detail', '')}"
            for c in row["checks"]
            if not c["ok"]
        ]
        passed = [c["name"] for c in row["checks"] if c["ok"]]
        if row.get("error"):
            note = row["error"]
        elif failing:
            note = "; ".join(failing)
        else:
            note = "ok: " + ", ".join(passed)
        table.append(
            [
                row["name"],
                row["state"] or "-",
                row["pid"] or "-",
                row["restarts"],
                _yes_no(row["up"]),
                _yes_no(row["ready"]),
                "-" if row["lag"] is None else row["lag"],
                note,
            ]
        )
    headers = ["service", "state", "pid", "restarts", "up", "ready", "lag", "checks"]
    return cli_render.table(headers, table)


def _yes_no(value: bool) -> str:
    from services.cli import render as cli_render

    return cli_render.paint("yes", "32") if value else cli_render.paint("no", "31")


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


def render_report(data: dict[str, Any]) -> str:
    """The table and a closing verdict (all ready, or which are not)."""
    rows = data["services"]
    verdict = (
        "all ready"
        if data["ready"]
        else "NOT ready: " + ", ".join(r["name"] for r in rows if not r["ready"])
    )
    return f"{render(rows)}\n\n{len(rows)} service(s), {verdict}"
