"""The chaos harness's view of the services: ops' supervisor, plus what a fault needs.

Every service runs under :class:`services.ops.supervisor.Supervisor`, which
restarts a crashed one with backoff, exactly as ``gridledger run`` does. The
harness adds the bookkeeping a fault report needs: which exits it caused on
purpose (so an exit it did not cause is reported as a crash), signals other
than SIGKILL (SIGSTOP/SIGCONT), and restarting one service with a changed
environment (a shifted clock through libfaketime).
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import time
from collections import Counter
from dataclasses import replace

from services.ops.fleet import RestartPolicy
from services.ops.specs import ServiceSpec
from services.ops.supervisor import Supervisor
from services.settings import Settings

NO_OPS_AFTER_S = 15.0
"""A running service whose ops port is still closed this long after its start has none."""
POLICY = RestartPolicy(initial_backoff_s=0.5, max_backoff_s=5.0, stable_after_s=20.0)


def libfaketime() -> str | None:
    """Path of Debian's libfaketime (package ``faketime``), or None."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


class Services:
    """Named services under the supervisor; counts the exits the harness caused."""

    def __init__(self, settings: Settings, log_dir: os.PathLike[str] | str) -> None:
        from pathlib import Path

        self.supervisor = Supervisor(settings, Path(log_dir), policy=POLICY)
        self.specs: dict[str, ServiceSpec] = {}
        self.caused: Counter[str] = Counter()
        """Exits the harness caused on purpose, per service."""
        self.answered: set[str] = set()
        """Services whose ops server answered at least once."""
        self.no_ops: set[str] = set()
        """Services that run but never opened their ops port (readiness = running)."""

    def start(self, spec: ServiceSpec) -> None:
        """Start a service under the phase's supervisor."""
        self.specs[spec.name] = spec
        self.supervisor.start(spec)

    def pid(self, name: str) -> int | None:
        """The service's pid now, or None between runs."""
        return self.supervisor.children[name].pid

    def restarts(self) -> dict[str, int]:
        """How often each service was restarted."""
        return {name: c.restarts for name, c in self.supervisor.children.items()}

    def kill(self, name: str) -> int:
        """SIGKILL ``name``'s process group and wait; the supervisor restarts it."""
        pid = self.pid(name) or 0
        self.caused[name] += 1
        self.supervisor.kill(name, signal.SIGKILL, restart=True)
        return pid

    def signal(self, name: str, sig: int) -> int:
        """Send ``sig`` (SIGSTOP, SIGCONT) to ``name``'s process group; its pid."""
        pid = self.pid(name) or 0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        return pid

    def restart_with(self, name: str, env: dict[str, str]) -> None:
        """Stop ``name`` (SIGKILL: its containers stay) and start it with ``env`` on top."""
        self.supervisor.kill(name, signal.SIGKILL, restart=False)
        base = self.specs[name]
        self.supervisor.start(replace(base, env={**base.env, **env}))

    def restore(self, name: str) -> None:
        """Stop ``name`` and start it again with its original environment."""
        self.supervisor.kill(name, signal.SIGKILL, restart=False)
        self.supervisor.start(self.specs[name])

    def ready(self, name: str) -> bool:
        """``/readyz`` of the service says ready (its dependencies answer).

        A service with no ops port, or whose ops server never answered at all (a
        service that does not open one), counts as ready while its process runs;
        :attr:`no_ops` names them for the report.
        """
        child = self.supervisor.children[name]
        if not child.ops_port:
            return child.alive()
        body = self.supervisor.readiness(name, timeout_s=2.0)
        if body is not None:
            self.answered.add(name)
            return bool(body.get("ready"))
        never_answered = name not in self.answered and child.alive()
        if never_answered and time.monotonic() - child.started_at > NO_OPS_AFTER_S:
            self.no_ops.add(name)
            return True
        return False

    def has_ops(self, name: str) -> bool:
        """Whether the service runs with an ops server."""
        return bool(self.supervisor.children[name].ops_port)

    def stop(self) -> None:
        """Stop every service (a SIGSTOPped one is continued first: it could not exit otherwise)."""
        for name in self.supervisor.children:
            self.signal(name, signal.SIGCONT)  # a stopped process cannot exit
        self.supervisor.stop()


def wait_alive(services: Services, name: str, old_pid: int, timeout: float = 60.0) -> float | None:
    """Seconds until ``name`` runs again under a new pid, or None."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        child = services.supervisor.children[name]
        if child.alive() and child.pid != old_pid:
            return time.monotonic() - began
        time.sleep(0.1)
    return None
