"""The chaos harness's own supervisor: start services, restart what dies, remember when.

Each service is a real process in its own process group (so a signal reaches
it and its children), with its output appended to ``<log_dir>/<name>.log``.
:meth:`Supervisor.tick` restarts a process that exited, with a capped
exponential backoff, and records every exit and restart: the report says which
services died under a fault and how long they took to come back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
"""Wait before the n-th consecutive restart (the last value repeats)."""
STABLE_S = 20.0
"""A process that ran this long resets its backoff."""


@dataclass
class Exit:
    name: str
    at: float
    """time.monotonic() of the moment the supervisor saw the exit."""
    code: int | None
    restarted_at: float | None = None
    expected: bool = False
    """True when the harness killed it on purpose (a fault)."""


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    wrapper: list[str] = field(default_factory=list)
    """Prepended to ``argv`` (``faketime -f +120s``, ``ip netns exec ...``)."""
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0
    hold: bool = False
    """Not restarted while set (a fault keeps it down on purpose)."""
    pending_exit: Exit | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Supervisor:
    """Runs named processes; ``tick()`` often (it is cheap) to restart the dead ones."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: dict[str, Proc] = {}
        self.exits: list[Exit] = []
        self._expected: set[str] = set()

    def gridledger(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        """Start ``gridledger ARGS`` (this interpreter's CLI) under ``name``."""
        return self.add(name, [sys.executable, "-m", "services.cli.main", *args], env)

    def python(
        self, name: str, module: str, args: list[str], env: dict[str, str] | None = None
    ) -> Proc:
        return self.add(name, [sys.executable, "-m", module, *args], env)

    def add(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        proc = Proc(name, argv, {**self.env, **(env or {})}, self.log_dir / f"{name}.log")
        self.procs[name] = proc
        self._spawn(proc)
        return proc

    def _spawn(self, proc: Proc) -> None:
        with proc.log_path.open("ab") as log:
            log.write(f"\n=== chaos: starting {' '.join(proc.wrapper + proc.argv)}\n".encode())
            log.flush()
            proc.popen = subprocess.Popen(
                [*proc.wrapper, *proc.argv],
                env={**proc.env, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.started_at = time.monotonic()

    def signal(self, name: str, sig: int) -> int:
        """Send ``sig`` to the process group of ``name``; its pid."""
        proc = self.procs[name]
        if proc.popen is None:
            raise RuntimeError(f"{name} was never started")
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self._expected.add(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, sig)
        return proc.popen.pid

    def kill(self, name: str) -> int:
        """SIGKILL ``name`` and its group, wait until it is gone; the supervisor restarts it."""
        pid = self.signal(name, signal.SIGKILL)
        proc = self.procs[name]
        assert proc.popen is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=30)
        return pid

    def restart_with(
        self, name: str, wrapper: list[str], env: dict[str, str] | None = None
    ) -> None:
        """Stop ``name`` (SIGTERM, then SIGKILL) and start it again under ``wrapper``."""
        proc = self.procs[name]
        proc.hold = True
        self._terminate(proc)
        proc.wrapper = list(wrapper)
        proc.env = {**proc.env, **(env or {})}
        proc.hold = False
        proc.failures = 0
        self._spawn(proc)

    def tick(self) -> list[Exit]:
        """Restart what exited (after its backoff); the exits seen by this call."""
        now = time.monotonic()
        seen = []
        for proc in self.procs.values():
            if proc.popen is None or proc.hold:
                continue
            code = proc.popen.poll()
            if code is None:
                if proc.failures and now - proc.started_at > STABLE_S:
                    proc.failures = 0
                continue
            if proc.pending_exit is None:
                proc.pending_exit = Exit(proc.name, now, code, expected=proc.name in self._expected)
                self._expected.discard(proc.name)
                self.exits.append(proc.pending_exit)
                seen.append(proc.pending_exit)
            wait = BACKOFF_S[min(proc.failures, len(BACKOFF_S) - 1)]
            if now - proc.pending_exit.at >= wait:
                proc.failures += 1
                self._spawn(proc)
                proc.pending_exit.restarted_at = proc.started_at
                proc.pending_exit = None
        return seen

    def restarts(self, since: float = 0.0) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.exits:
            if e.at >= since:
                counts[e.name] = counts.get(e.name, 0) + 1
        return counts

    def unexpected_exits(self, since: float = 0.0) -> list[Exit]:
        return [e for e in self.exits if e.at >= since and not e.expected]

    def _terminate(self, proc: Proc, grace_s: float = 10.0) -> None:
        if proc.popen is None or proc.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGCONT)  # a stopped process cannot exit
            os.killpg(proc.popen.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.hold = True
        for proc in self.procs.values():
            if proc.popen is not None and proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGCONT)
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            if proc.popen is None:
                continue
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=30)
