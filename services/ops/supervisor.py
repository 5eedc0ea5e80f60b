"""Run a set of gridledger services as child processes and keep them running.

:class:`Supervisor` starts each service (``python -m services.cli.main <args>``)
in a session of its own, its stdout and stderr appended to
``<log_dir>/<name>.log``. A watcher thread polls the children: one that exits
without being asked to is started again after a capped exponential backoff
(:class:`~services.ops.fleet.RestartPolicy`), with a line saying so in its log
and in the supervisor's. :meth:`Supervisor.stop` sends SIGTERM to every child's
process group, waits, then SIGKILLs what is left, and reaps every pid it ever
started, so nothing is left behind.

With ``policy=None`` nothing is restarted and :meth:`check_alive` raises when a
child died: what the benchmarks and tests want (a crash there is a failure to
report, not to hide).

The state file (``<home>/run/fleet.json`` for ``gridledger run``) lists each
service's pid, ops URL, log and restarts; ``gridledger health`` reads it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.errors import StackError
from services.clock import utcnow
from services.ops.fleet import RestartPolicy
from services.ops.specs import ServiceSpec, free_port, settings_env, tail
from services.settings import Settings

log = logging.getLogger(__name__)

POLL_S = 0.2


@dataclass
class Child:
    """One supervised service and its history."""

    spec: ServiceSpec
    log_path: Path
    ops_port: int
    process: subprocess.Popen[bytes] | None = None
    state: str = "starting"
    """running, backoff (waiting to restart), stopped (on purpose), failed (gave up)."""
    started_at: float = 0.0
    crashes_in_a_row: int = 0
    restarts: int = 0
    restart_at: float | None = None
    last_exit: int | None = None
    pids: list[int] = field(default_factory=list)
    """Every pid this service had, oldest first."""

    @property
    def pid(self) -> int | None:
        """The running process's pid, or None between runs."""
        return self.process.pid if self.process is not None else None

    @property
    def name(self) -> str:
        """The service's name, from its spec."""
        return self.spec.name

    def alive(self) -> bool:
        """Whether the process runs now."""
        return self.process is not None and self.process.poll() is None


class Supervisor:
    """Start, watch, restart and stop gridledger services (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        log_dir: Path | None = None,
        *,
        policy: RestartPolicy | None = None,
        state_file: Path | None = None,
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir or settings.logs_dir
        self.policy = policy
        self.state_file = state_file
        self.children: dict[str, Child] = {}
        self._lock = threading.RLock()
        self._stopping = False
        self._watcher: threading.Thread | None = None
        self._wake = threading.Event()

    # ------------------------------------------------------------------ starting

    def start(self, spec: ServiceSpec) -> Child:
        """Start one service (and the watcher thread, once)."""
        with self._lock:
            existing = self.children.get(spec.name)
            if existing is not None and existing.alive():
                raise StackError(f"service {spec.name} is already running")
            self.log_dir.mkdir(parents=True, exist_ok=True)
            port = spec.ops_port
            if port == "auto":
                port = existing.ops_port if existing and existing.ops_port else free_port()
            child = Child(spec, self.log_dir / f"{spec.name}.log", int(port))
            if existing is not None:
                child.pids = existing.pids
            self.children[spec.name] = child
            self._spawn(child)
            self._write_state()
        self._ensure_watcher()
        return child

    def start_all(self, specs: Iterable[ServiceSpec]) -> None:
        """Start every service; each is supervised from its start on."""
        for spec in specs:
            self.start(spec)

    def _spawn(self, child: Child) -> None:
        env = {
            **os.environ,
            **settings_env(self.settings),
            **child.spec.env,
            "GRIDLEDGER_OPS_PORT": str(child.ops_port),
            "PYTHONUNBUFFERED": "1",
        }
        with child.log_path.open("ab") as out:
            child.process = subprocess.Popen(
                [*child.spec.wrapper, sys.executable, "-m", "services.cli.main", *child.spec.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        child.pids.append(child.process.pid)
        child.state = "running"
        child.started_at = time.monotonic()
        child.restart_at = None

    # ------------------------------------------------------------------ watching

    def _ensure_watcher(self) -> None:
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(
                target=self._watch, name="gridledger-supervisor", daemon=True
            )
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stopping:
            try:
                self.poll()
            except Exception:  # the watcher must outlive one bad poll
                log.exception("supervisor poll failed")
            self._wake.wait(POLL_S)
            self._wake.clear()

    def poll(self) -> None:
        """Notice exits, schedule restarts, start what is due (the watcher calls this)."""
        now = time.monotonic()
        with self._lock:
            if self._stopping:
                return
            changed = False
            for child in self.children.values():
                if child.state == "running" and child.process is not None:
                    code = child.process.poll()
                    if code is not None:
                        self._exited(child, code, now)
                        changed = True
                elif (
                    child.state == "backoff"
                    and child.restart_at is not None
                    and now >= child.restart_at
                ):
                    child.restarts += 1
                    self._note(child, f"restarting (restart {child.restarts})")
                    self._spawn(child)
                    changed = True
            if changed:
                self._write_state()

    def _exited(self, child: Child, code: int, now: float) -> None:
        child.last_exit = code
        if child.process is not None:
            _end_group(child.process.pid)
        ran = now - child.started_at
        how = f"signal {-code}" if code < 0 else f"code {code}"
        if self.policy is None or not child.spec.restart:
            child.state = "exited"
            self._note(child, f"exited with {how} after {ran:.1f} s; not restarted")
            return
        stable = ran >= self.policy.stable_after_s
        child.crashes_in_a_row = 1 if stable else child.crashes_in_a_row + 1
        limit = self.policy.give_up_after
        if limit is not None and child.crashes_in_a_row >= limit:
            child.state = "failed"
            self._note(
                child,
                f"exited with {how} after {ran:.1f} s; {child.crashes_in_a_row} crashes in a "
                f"row, giving up (see {child.log_path})",
            )
            return
        delay = self.policy.delay(child.crashes_in_a_row)
        child.state = "backoff"
        child.restart_at = now + delay
        self._note(child, f"exited with {how} after {ran:.1f} s; restarting in {delay:.1f} s")

    def _note(self, child: Child, message: str) -> None:
        """Say it in the supervisor's log and in the service's own log file."""
        log.warning("%s: %s", child.name, message)
        stamp = utcnow().isoformat(timespec="seconds")
        with contextlib.suppress(OSError), child.log_path.open("a") as out:
            out.write(f"{stamp} [supervisor] {child.name} {message}\n")

    # ------------------------------------------------------------------ checks

    def check_alive(self) -> None:
        """Raise with the tail of its log if a service died and will not come back."""
        self.poll()
        with self._lock:
            for child in self.children.values():
                if child.state in ("exited", "failed"):
                    raise StackError(
                        f"service {child.name} exited with code {child.last_exit}"
                        + (" and was not restarted" if child.state == "exited" else "")
                        + f"; last lines of {child.log_path}:\n"
                        + tail(child.log_path)
                    )

    def ops_url(self, name: str) -> str | None:
        """Where the service's ops server answers, or None when it runs without one."""
        child = self.children[name]
        if not child.ops_port:
            return None
        return f"http://{self.settings.ops_host}:{child.ops_port}"

    def readiness(self, name: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
        """The service's ``/readyz`` body (also on a 503), or None when it does not answer."""
        url = self.ops_url(name)
        if url is None:
            return None
        return fetch_json(f"{url}/readyz", timeout_s)

    def wait_ready(self, names: Iterable[str] | None = None, timeout_s: float = 90.0) -> None:
        """Wait until every named service's ``/readyz`` says ready; fail early on a death."""
        pending = set(names if names is not None else self.children)
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while pending:
            self.check_alive()
            for name in sorted(pending):
                body = self.readiness(name)
                last[name] = body
                if body is not None and body.get("ready"):
                    pending.discard(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                why = "; ".join(f"{n}: {_failing(last.get(n))}" for n in sorted(pending))
                raise StackError(f"not ready within {timeout_s:.0f} s: {why}")
            time.sleep(0.3)

    def wait_for_api(self, timeout_s: float = 60.0) -> None:
        """Wait until the API's ``/readyz`` answers 200 on its own port."""
        url = f"http://{self.settings.api_host}:{self.settings.api_port}/readyz"
        deadline = time.monotonic() + timeout_s
        body: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            self.check_alive()
            body = fetch_json(url, 2.0)
            if body is not None and body.get("ready"):
                return
            time.sleep(0.3)
        raise StackError(
            f"the API did not answer ready on {url} within {timeout_s:.0f} s: {_failing(body)}"
        )

    # ------------------------------------------------------------------ stopping

    def kill(self, name: str, sig: int = signal.SIGKILL, *, restart: bool = False) -> None:
        """Send ``sig`` to one service and wait for it to end.

        ``restart=False`` (a node taken away on purpose): it stays stopped.
        ``restart=True`` (a crash): the supervisor treats it as any other exit.
        """
        with self._lock:
            child = self.children[name]
            if not restart:
                child.state = "stopped"
            process = child.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            process.wait(timeout=30)
        self._wake.set()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every service's process group, SIGKILL what is left after ``grace_s``."""
        with self._lock:
            self._stopping = True
            children = list(self.children.values())
        self._wake.set()
        running = [c for c in children if c.process is not None and c.process.poll() is None]
        for child in running:
            assert child.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in running:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s; SIGKILL", child.name, grace_s)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait(timeout=10)
        for child in children:
            if child.process is not None:
                _end_group(child.process.pid)
            if child.state != "failed":
                child.state = "stopped"
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
        self._write_state()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ state file

    def status(self) -> list[dict[str, Any]]:
        """Every service's state, pids and restarts, as the state file and `gridledger health`
        show them."""
        with self._lock:
            return [
                {
                    "name": c.name,
                    "state": c.state,
                    "pid": c.pid if c.alive() else None,
                    "pids": list(c.pids),
                    "ops_url": self.ops_url(c.name),
                    "log": str(c.log_path),
                    "restarts": c.restarts,
                    "last_exit": c.last_exit,
                }
                for c in self.children.values()
            ]

    def _write_state(self) -> None:
        if self.state_file is None:
            return
        data = {
            "supervisor_pid": os.getpid(),
            "written_at": utcnow().isoformat(timespec="seconds"),
            "services": self.status(),
        }
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.state_file)


def _end_group(pgid: int) -> None:
    """SIGKILL what is left of a service's process group once its leader has ended.

    The group id stays reserved while any member lives, so this reaches only the
    service's own descendants (none normally; a stray one if the service forked).
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def fetch_json(url: str, timeout_s: float) -> dict[str, Any] | None:
    """GET a JSON document; its body also on 4xx/5xx; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            return dict(json.loads(exc.read()))
        except (ValueError, OSError):
            return {"ready": False, "error": f"HTTP {exc.code}"}
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _failing(body: dict[str, Any] | None) -> str:
    if body is None:
        return "no answer"
    bad = [f"{c['name']} ({c.get('detail', '')})" for c in body.get("checks", []) if not c["ok"]]
    return ", ".join(bad) or body.get("error", "not ready")


def supervisor_alive(state_file: Path) -> int | None:
    """The pid of the supervisor that wrote ``state_file`` if it still runs, else None."""
    try:
        pid = int(json.loads(state_file.read_text())["supervisor_pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid():
        return pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _is_service_process(pid: int) -> bool:
    """The pid runs ``services.cli.main`` (a gridledger service), not a reused pid."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"services.cli.main" in cmdline


def reap_orphans(state_file: Path, grace_s: float = 10.0) -> list[int]:
    """Stop the services a dead supervisor left running (it was SIGKILLed, say).

    Only pids the state file lists, and only while they still run a gridledger
    service: a pid the system reused for something else is left alone.
    """
    if supervisor_alive(state_file) is not None:
        return []
    try:
        services = json.loads(state_file.read_text()).get("services", [])
    except (OSError, ValueError):
        return []
    pids = [s["pid"] for s in services if s.get("pid") and _is_service_process(int(s["pid"]))]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_is_service_process(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _is_service_process(pid):
            _end_group(pid)
    return pids
