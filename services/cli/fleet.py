"""``gridledger run`` and ``gridledger health``: the local deployment, supervised, from a
fleet file, and the health table of a running set.

Starts every service the fleet file lists (on the stack ``gridledger dev up``
started), waits until each one's ``/readyz`` says ready, prints the health
table, then keeps them running — a crashed service is restarted with capped
backoff — until SIGINT or SIGTERM, when it stops everything it started.
Logs: ``<home>/run/logs/<service>.log``; state: ``<home>/run/fleet.json``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from infra.stack import probe
from schemas.errors import GridledgerError, StackError
from services.cli import render
from services.ops import health
from services.ops.fleet import load_fleet
from services.ops.supervisor import Supervisor, reap_orphans, supervisor_alive
from services.settings import Settings


def run_fleet(
    settings: Settings,
    fleet_path: Path,
    *,
    ready_timeout_s: float = 120.0,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> int:
    """`gridledger run`: start a fleet file's services and agents and supervise them until
    ``stop``; a fleet that does not come up raises, naming what did not."""
    fleet = load_fleet(fleet_path)
    specs = fleet.specs(fleet_path.resolve().parent)
    state = health.state_file(settings.home)
    owner = supervisor_alive(state)
    if owner is not None:
        raise GridledgerError(
            f"another supervisor (pid {owner}) already runs the services of {settings.home} "
            f"(see {state}); stop it first, or use another GRIDLEDGER_HOME"
        )
    left = reap_orphans(state)
    if left:
        say(f"stopped {len(left)} service(s) a previous supervisor left running: pids {left}")
    problems = probe(settings)
    if problems:
        raise StackError(
            "the local stack is not up (" + "; ".join(problems) + "); start it with "
            "`gridledger dev up`"
        )
    stop = stop or threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {
        sig: signal.signal(sig, on_signal)
        for sig in (signal.SIGTERM, signal.SIGINT)
        if threading.current_thread() is threading.main_thread()
    }
    supervisor = Supervisor(
        settings, settings.home / "run" / "logs", policy=fleet.restart, state_file=state
    )
    try:
        say(f"starting {len(specs)} service(s) from {fleet_path} (logs in {supervisor.log_dir})")
        supervisor.start_all(specs)
        try:
            supervisor.wait_ready(timeout_s=ready_timeout_s)
        except StackError as exc:
            say(f"warning: {exc}")
        targets, _ = health.targets_from_state(state)
        say(health_table(health.collect(targets)))
        say("supervising; `gridledger health` shows the set, Ctrl-C (SIGTERM) stops it")
        seen = {c["name"]: c["restarts"] for c in supervisor.status()}
        while not stop.wait(1.0):
            for item in supervisor.status():
                if item["restarts"] != seen.get(item["name"]):
                    seen[item["name"]] = item["restarts"]
                    say(f"{item['name']} restarted ({item['restarts']} so far; log {item['log']})")
    finally:
        say("stopping every service")
        supervisor.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def health_table(rows: Sequence[dict[str, Any]]) -> str:
    """The `gridledger health` table: each service's state, readiness and failing checks."""
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
    return render.table(headers, table)


def _yes_no(value: bool) -> str:
    return render.paint("yes", "32") if value else render.paint("no", "31")


def render_report(data: dict[str, Any]) -> str:
    """The table and a closing verdict (all ready, or which are not)."""
    rows = data["services"]
    verdict = (
        "all ready"
        if data["ready"]
        else "NOT ready: " + ", ".join(r["name"] for r in rows if not r["ready"])
    )
    return f"{health_table(rows)}\n\n{len(rows)} service(s), {verdict}"
