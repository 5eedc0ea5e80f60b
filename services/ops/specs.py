"""What a gridledger service process is given: its arguments, environment and ops port.

The supervisor (:mod:`services.ops.supervisor`) starts these. Every service gets
the same settings through ``GRIDLEDGER_*`` environment variables, so a test can
run a complete, isolated installation with its own topic prefix, Postgres schema
and API port.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path

from services.settings import Settings

LOCAL_AGENT_ENV = {
    # Quick heartbeats and ticks so a short local run shows them; images are built locally,
    # never pulled; job containers stop with the agent instead of waiting for a re-attach.
    "GRIDLEDGER_AGENT_HEARTBEAT_INTERVAL_S": "1",
    "GRIDLEDGER_AGENT_NODE_HEARTBEAT_INTERVAL_S": "2",
    "GRIDLEDGER_AGENT_METER_INTERVAL_S": "2",
    "GRIDLEDGER_AGENT_PULL_POLICY": "never",
    "GRIDLEDGER_AGENT_SHUTDOWN_POLICY": "stop",
}
"""Agent settings of the local installations the demo and the benchmarks start."""


def settings_env(settings: Settings) -> dict[str, str]:
    """Every setting as the ``GRIDLEDGER_*`` variable a child process reads."""
    env = {}
    for name, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        env[f"GRIDLEDGER_{name.upper()}"] = (
            json.dumps(value) if isinstance(value, list | dict) else str(value)
        )
    return env


@dataclass
class ServiceSpec:
    """One service to run: a name (also its log file) and the ``gridledger`` arguments.

    ``ops_port``: ``"auto"`` gives it a free port for its ops server (``/healthz``,
    ``/readyz``, ``/metrics``; passed as ``GRIDLEDGER_OPS_PORT``), 0 none, or a number.
    ``restart``: whether the supervisor restarts it when it crashes.
    ``wrapper``: a command the service runs under (``ip netns exec NS`` for the
    chaos suite's partitioned agent, ``faketime -f -120s`` for a shifted clock); empty
    for none.
    """

    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ops_port: int | str = "auto"
    restart: bool = True
    wrapper: list[str] = field(default_factory=list)


def free_port() -> int:
    """A port nothing listens on right now on 127.0.0.1 (the OS picks it); another process
    may still take it before it is bound."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports nothing listens on right now (bound together, then freed)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tail(path: Path, lines: int = 30) -> str:
    """The last lines of a service's log, for an error message; ``(no log)`` when there is none."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
