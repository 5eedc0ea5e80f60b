"""The chaos harness: a private installation under a mixed workload, faults, invariants.

A :class:`Phase` brings up a stack of its own (own home, free ports; 1 broker
or the 3-broker cluster), the services (sink, api, scheduler, processors), two
real Docker agents and a process of simulated agents, all under
:class:`services.ops.supervisor.Supervisor` (through :class:`.procs.Services`),
which restarts what crashes; concurrent submitters post jobs through the API.
It injects its faults one after the other (an overlap is several at once);
after each one it measures how long each part took to work again and checks
the invariants over the whole ledger; at the end it stops submitting, lets
every job end, checks again and runs ``gridledger replay --verify``.

:func:`run_suite` runs the phases of a mode (``quick``: one small phase, a few
fault kinds; ``full``: hundreds of jobs, every fault kind, and the leader kill
on the 3-broker cluster) and returns the report :mod:`.report` prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from infra import kafka, postgres, processes, stack, tokens
from infra.private import link_jars, new_home, private_settings
from projections.bounds import Thresholds
from schemas.errors import StackError
from schemas.views import TERMINAL_STATUSES
from services.chaos import collect
from services.chaos.faults import FAULTS, members, missing_need, runs_on
from services.chaos.invariants import Acks, Timings, Verdict, check
from services.chaos.netns import Namespace, serve_forward
from services.chaos.netns import available as netns_available
from services.chaos.procs import Services
from services.chaos.workload import DOCKER_MODEL, SIM_MODEL, Planned, Workload, plan
from services.clock import utcnow
from services.ledger import Ledger, TopicPartition
from services.ops.specs import ServiceSpec, settings_env
from services.settings import Settings
from services.sink.consumer import CONSUMER_NAME

TIMINGS_ENV = {
    # Short deadlines, so a paused or lost agent is declared within seconds, and a
    # killed processors worker's partitions are taken over quickly.
    "GRIDLEDGER_WATCHDOG_SILENCE_S": "5",
    "GRIDLEDGER_WATCHDOG_LOST_AFTER_S": "5",
    "GRIDLEDGER_WATCHDOG_FINISHING_TIMEOUT_S": "60",
    "GRIDLEDGER_SCHEDULER_NODE_TIMEOUT_S": "10",
    "GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S": "30",
    "GRIDLEDGER_PROCESSORS_SESSION_TIMEOUT_S": "10",
    "GRIDLEDGER_PROCESSORS_HEARTBEAT_INTERVAL_S": "1",
}
AGENT_ENV = {
    "GRIDLEDGER_AGENT_HEARTBEAT_INTERVAL_S": "1",
    "GRIDLEDGER_AGENT_NODE_HEARTBEAT_INTERVAL_S": "2",
    "GRIDLEDGER_AGENT_METER_INTERVAL_S": "2",
    "GRIDLEDGER_AGENT_PULL_POLICY": "never",
    # Killed or restarted agents leave their containers running and re-attach.
    "GRIDLEDGER_AGENT_SHUTDOWN_POLICY": "detach",
}
TIMINGS = Timings(
    Thresholds(
        dispatch_timeout_s=float(TIMINGS_ENV["GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S"]),
        silence_s=float(TIMINGS_ENV["GRIDLEDGER_WATCHDOG_SILENCE_S"]),
        lost_after_s=float(TIMINGS_ENV["GRIDLEDGER_WATCHDOG_LOST_AFTER_S"]),
        finishing_timeout_s=float(TIMINGS_ENV["GRIDLEDGER_WATCHDOG_FINISHING_TIMEOUT_S"]),
    ),
    slack_s=120,
)
SPOOL_MIB = 32
RECOVERY_TIMEOUT_S = 240.0
SETTLE_S = 30.0
"""Mid-run, a job that ended less than this long ago may still have its accounting pending."""


@dataclass(frozen=True)
class PhaseConfig:
    """One phase of a chaos run: its private stack's size, the faults it injects and the load."""

    name: str
    brokers: int
    faults: tuple[str, ...]
    jobs: int
    submitters: int
    sim_nodes: int = 10
    sim_gpus: int = 4
    docker_gpus: int = 2
    docker_share: float = 0.2
    keyed_share: float = 0.2
    verify_after_each: bool = False
    outage_s: float = 15.0
    skew_s: float = 20.0
    seed: int = 1


QUICK = (
    PhaseConfig(
        "quick",
        brokers=1,
        faults=("kill-processors", "kill-sink", "kill-postgres"),
        jobs=40,
        submitters=50,
        sim_nodes=6,
        outage_s=8.0,
    ),
)
FULL = (
    PhaseConfig(
        "single-broker",
        brokers=1,
        faults=(
            "kill-processors",
            "kill-sink",
            "kill-scheduler",
            "kill-api",
            "kill-agent-1",
            "kill-agent-2",
            "kill-simagents",
            "kill-postgres",
            "kill-broker",
            "pause-agent",
            "clock-ahead",
            "clock-behind",
            "disk-full",
            "partition-agent",
            "overlap-services",
            "overlap-postgres-agent",
            "overlap-broker-processors",
        ),
        jobs=400,
        submitters=60,
        verify_after_each=True,
    ),
    PhaseConfig(
        "three-brokers",
        brokers=3,
        faults=("kill-leader", "overlap-leader-agent"),
        jobs=150,
        submitters=50,
        verify_after_each=True,
    ),
)


@dataclass
class FaultResult:
    """What one injected fault did, and when, as the report records it."""

    name: str
    members: tuple[str, ...]
    injected_at: str
    detail: list[str]
    recovery_s: dict[str, float | None] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    unexpected_exits: list[str] = field(default_factory=list)
    check: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The result as the report's JSON holds it."""
        return {
            "fault": self.name,
            "members": list(self.members),
            "injected_at": self.injected_at,
            "detail": self.detail,
            "recovery_s": self.recovery_s,
            "restarts": self.restarts,
            "unexpected_exits": self.unexpected_exits,
            "check": self.check,
            "replay_verify": self.verify,
        }


class Phase:
    """One private installation, its workload and its faults."""

    def __init__(self, shared: Settings, config: PhaseConfig, say: Callable[[str], None]) -> None:
        self.shared = shared
        self.config = config
        self.say = say
        self.run_id = uuid.uuid4().hex[:6]
        self.home = new_home(f"gl-chaos-{config.name}-")
        self.settings = private_settings(shared, self.home, brokers=config.brokers)
        self.timings = TIMINGS
        self.outage_s = config.outage_s
        self.skew_s = config.skew_s
        self.docker_agents = ["agent-d1", "agent-d2"]
        self.node_ids = {name: f"chaos-{self.run_id}-{name[-2:]}" for name in self.docker_agents}
        self.spool_mount: Path | None = None
        self.logs_kept: Path | None = None
        self.netns: Namespace | None = None
        self._forwarders: list[subprocess.Popen[bytes]] = []
        self._relays: list[asyncio.Server] = []
        self.services = Services(self.settings, self.home / "logs" / "services")
        self.sim_acks_file = self.home / "simagents.acks"
        self.workload: Workload | None = None
        self.results: list[FaultResult] = []
        self.skipped: dict[str, str] = {}
        self._http: aiohttp.ClientSession | None = None
        self.token = ""

    # ------------------------------------------------------------------ the stack

    async def start(self) -> None:
        """Start the phase's private stack (once more on new ports if a port was taken
        meanwhile)."""
        if not link_jars(self.shared, self.home):
            raise RuntimeError(
                f"no Kafka jars in {self.shared.home}/kafka/lib: run `gridledger dev up` once"
            )
        began = time.monotonic()
        try:
            await stack.up(self.settings)
        except StackError as exc:
            # Free ports are picked before they are bound: on a machine where other test
            # runs pick ports too, one may be taken in between. Once more on new ports.
            self.say(f"[{self.config.name}] the private stack did not start ({exc}); retrying")
            await asyncio.to_thread(stack.down, self.settings)
            self.settings = private_settings(self.shared, self.home, brokers=self.config.brokers)
            self.services = Services(self.settings, self.home / "logs" / "services")
            await stack.up(self.settings)
        self.token = tokens.token_for(self.settings, "dev")
        self.say(
            f"[{self.config.name}] private stack in {self.home}: {self.config.brokers} broker(s) "
            f"at {self.settings.kafka_bootstrap}, Postgres :{self.settings.pg_port} "
            f"({time.monotonic() - began:.0f} s)"
        )
        self._mount_spool()
        wrapper = await self._make_netns()
        start = self.services.start
        start(ServiceSpec("sink", ["sink"], TIMINGS_ENV))
        port = str(self.settings.api_port)
        start(ServiceSpec("api", ["api", "--host", "127.0.0.1", "--port", port], TIMINGS_ENV))
        start(ServiceSpec("scheduler", ["scheduler"], TIMINGS_ENV))
        start(ServiceSpec("processors", ["processors"], TIMINGS_ENV))
        for name in self.docker_agents:
            inventory = self.home / f"{name}.inventory.json"
            gpus = [
                {"index": i, "model": DOCKER_MODEL, "memory_total_mb": 16384}
                for i in range(self.config.docker_gpus)
            ]
            inventory.write_text(json.dumps({"gpus": gpus}))
            args = ["agent", "--node-id", self.node_ids[name], "--provider", f"chaos-{name}",
                    "--region", "local", "--inventory", str(inventory)]  # fmt: skip
            env = {**TIMINGS_ENV, **AGENT_ENV}
            if name == self.docker_agents[0] and wrapper:
                # Inside the namespace its ops port is not reachable from here: none.
                start(ServiceSpec(name, args, env, ops_port=0, wrapper=wrapper))
            else:
                start(ServiceSpec(name, args, env))
        sim_args = ["chaos-simagents", "--nodes", str(self.config.sim_nodes),
                    "--gpus-per-node", str(self.config.sim_gpus), "--gpu-model", SIM_MODEL,
                    "--prefix", f"sim-{self.run_id}", "--acks", str(self.sim_acks_file),
                    "--seed", str(self.config.seed)]  # fmt: skip
        start(ServiceSpec("simagents", sim_args, TIMINGS_ENV, ops_port=0))
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
        await self._until(self._api_ok, 180, "the API to answer")
        want = self.config.sim_nodes + len(self.docker_agents)
        await self._until(lambda: self._nodes_at_least(want), 180, f"{want} nodes to register")
        self.say(f"[{self.config.name}] services up, {want} nodes registered")

    def _mount_spool(self) -> None:
        """The second agent's spool on a small tmpfs, for the disk-full fault."""
        if "disk-full" not in {m for f in self.config.faults for m in members(f)}:
            return
        from services.agent.settings import AgentSettings

        node_id = self.node_ids[self.docker_agents[-1]]
        spool = AgentSettings(node_id=node_id).spool_dir(self.home)
        spool.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SPOOL_MIB}m", "tmpfs", str(spool)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode == 0:
            self.spool_mount = spool
        else:
            self.skipped["disk-full"] = f"mount tmpfs failed: {mounted.stderr.strip()}"

    async def _make_netns(self) -> list[str]:
        """The first agent's own network namespace, for the partition fault; its wrapper."""
        if "partition-agent" not in {m for f in self.config.faults for m in members(f)}:
            return []
        why = await asyncio.to_thread(netns_available)
        if why:
            self.skipped["partition-agent"] = why
            return []
        ns = Namespace(self.run_id, int(self.run_id[:2], 16) % 200 + 10)
        await asyncio.to_thread(ns.create)
        self.netns = ns
        # Every broker, and the object store the agent uploads artifacts to.
        ports = [n.port for n in kafka.cluster_nodes(self.settings)] + [self.settings.s3_port]
        for port in ports:
            relay = await serve_forward((ns.host_ip, port), ("127.0.0.1", port))
            self._relays.append(relay)
            log = (self.home / "logs" / f"forward-{port}.log").open("ab")
            forward = ["forward", f"127.0.0.1:{port}", f"{ns.host_ip}:{port}"]
            self._forwarders.append(
                subprocess.Popen(  # noqa: ASYNC220 - returns once forked; lives until stop()
                    [*ns.wrapper(), sys.executable, "-m", "services.chaos.netns", *forward],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return ns.wrapper()

    async def restart_postgres(self) -> None:
        """Start Postgres again after a kill, retrying while its port or pid file is stale."""
        await self._retrying(lambda: postgres.up(self.settings, timeout=60), "Postgres")

    async def restart_kafka(self) -> None:
        """Start the brokers again after a kill, retrying while a port or pid file is stale."""
        await self._retrying(lambda: kafka.up(self.settings, timeout=120), "Kafka")

    async def _retrying(self, up: Callable[[], Any], what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                await up()
            except Exception as exc:  # a stale pid file or port: try again shortly
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not come back: {exc}") from exc
                await asyncio.sleep(1.0)
            else:
                return

    async def wait_gone(self, pid: int, timeout: float = 30.0) -> None:
        """Until the process ``pid`` is gone, or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        # Another process's exit sets no event here: polling its pid is the only way.
        while processes.is_alive(pid) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """Stop everything the phase started: services, forwarders, namespace, containers, the
        stack."""
        await asyncio.to_thread(self.services.stop)
        for forwarder in self._forwarders:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(forwarder.pid, 9)
            await asyncio.to_thread(forwarder.wait, timeout=10)
        for relay in self._relays:
            relay.close()
        if self.netns is not None:
            await asyncio.to_thread(self.netns.delete)
        if self._http is not None:
            await self._http.close()
        for node_id in self.node_ids.values():
            label = f"label=gridledger.node_id={node_id}"
            await asyncio.to_thread(
                subprocess.run,
                f"docker ps -aq --filter {label} | xargs -r docker rm -f",
                shell=True,
                capture_output=True,
                check=False,
            )
        if self.spool_mount is not None:
            await asyncio.to_thread(
                subprocess.run, ["umount", "-l", str(self.spool_mount)], capture_output=True
            )
        with contextlib.suppress(Exception):
            await asyncio.to_thread(stack.down, self.settings)
        # The services' logs outlive the private stack, for whoever reads the report.
        kept = self.shared.home / "chaos" / f"logs-{self.config.name}-{self.run_id}"
        with contextlib.suppress(OSError):
            shutil.copytree(self.home / "logs" / "services", kept, dirs_exist_ok=True)
        self.logs_kept = kept
        shutil.rmtree(self.home, ignore_errors=True)

    # ------------------------------------------------------------------ API probes

    @property
    def base_url(self) -> str:
        """The phase's API."""
        return f"http://127.0.0.1:{self.settings.api_port}"

    @property
    def http(self) -> aiohttp.ClientSession:
        """The phase's HTTP session (open between start and stop)."""
        assert self._http is not None
        return self._http

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def _api_ok(self) -> bool:
        try:
            async with self.http.get(f"{self.base_url}/healthz") as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def _nodes_at_least(self, count: int) -> bool:
        try:
            async with self.http.get(f"{self.base_url}/v1/nodes", headers=self._auth()) as r:
                if r.status != 200:
                    return False
                nodes = (await r.json()).get("nodes", [])
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return False
        return len(nodes) >= count

    async def _probe_job(self, docker: bool) -> bool:
        """Submit one job and wait until it ends; True once it did (any terminal status)."""
        spec = plan(1, 1.0 if docker else 0.0, 0.0, seed=int(time.time()), tag=self.run_id)[0].spec
        job_id = None
        while job_id is None:
            try:
                async with self.http.post(
                    f"{self.base_url}/v1/jobs", json=spec, headers=self._auth()
                ) as r:
                    if r.status in (200, 201, 202):
                        body = await r.json()
                        job_id = body["job_id"]
                        assert self.workload is not None
                        self.workload.result.acks.jobs.setdefault(job_id, utcnow())
                        if body.get("event_id"):
                            self.workload.result.acks.event_ids.add(body["event_id"])
                        break
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass
            await asyncio.sleep(0.5)
        while True:
            try:
                async with self.http.get(
                    f"{self.base_url}/v1/jobs/{job_id}", headers=self._auth()
                ) as r:
                    if r.status == 200 and (await r.json()).get("status") in TERMINAL_STATUSES:
                        return True
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                pass
            await asyncio.sleep(0.5)

    async def _sink_caught_up(self, ends: dict[TopicPartition, int]) -> bool:
        try:
            conn = await asyncpg.connect(self.settings.dsn, timeout=5)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        try:
            rows = await conn.fetch(
                f'SELECT topic, partition, next_offset FROM "{self.settings.pg_schema}"'
                ".consumer_offsets WHERE consumer = $1",
                CONSUMER_NAME,
            )
        except asyncpg.PostgresError:
            return False
        finally:
            await conn.close()
        done = {TopicPartition(r["topic"], r["partition"]): r["next_offset"] for r in rows}
        return all(done.get(tp, 0) >= end for tp, end in ends.items())

    async def _end_offsets(self) -> dict[TopicPartition, int]:
        topic = self.settings.topic("job-events")
        async with Ledger(self.settings, "chaos-offsets") as ledger:
            tps = [TopicPartition(topic, p) for p in range(await ledger.partitions(topic))]
            consumer = ledger.consumer()
            await consumer.start()
            try:
                return dict(await consumer.end_offsets(tps))
            finally:
                await consumer.stop()

    async def _until(self, check: Callable[[], Any], timeout: float, what: str) -> float:
        began = time.monotonic()
        while True:
            if await check():
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            await asyncio.sleep(0.3)

    async def _timed(self, check: Callable[[], Any], began: float) -> float | None:
        """Seconds from ``began`` until ``check`` holds, or None after the recovery timeout."""
        while True:
            if await check():
                return round(time.monotonic() - began, 2)
            if time.monotonic() - began > RECOVERY_TIMEOUT_S:
                return None
            await asyncio.sleep(0.3)

    async def _timed_once(self, work: Any, began: float) -> float | None:
        """Seconds from ``began`` until ``work`` finished, or None after the recovery timeout."""
        try:
            await asyncio.wait_for(work, RECOVERY_TIMEOUT_S - (time.monotonic() - began))
        except TimeoutError:
            return None
        return round(time.monotonic() - began, 2)

    # ------------------------------------------------------------------ the run

    async def run(self) -> dict[str, Any]:
        """Run the phase: the load, each fault in turn, then the final check over the whole
        ledger."""
        cfg = self.config
        began = time.monotonic()
        try:
            await self.start()
        except BaseException:
            await self.stop()  # whatever of the private stack did start
            raise
        self.workload = Workload(self.base_url, self.token, cfg.submitters)
        planned = plan(cfg.jobs, cfg.docker_share, cfg.keyed_share, cfg.seed, self.run_id)
        faults = [f for f in cfg.faults if runs_on(f, cfg.brokers)]
        for name in faults:
            reason = missing_need(name) or self.skipped.get(name)
            if reason:
                self.skipped[name] = reason
        faults = [f for f in faults if f not in self.skipped]
        chunks = _split(planned, len(faults) + 1)
        stop = asyncio.Event()
        submitting = asyncio.create_task(self.workload.run(stop))
        try:
            self.workload.feed(chunks[0])
            for name, chunk in zip(faults, chunks[1:], strict=True):
                await self._until(self._load_in_flight, 120, "submissions to be taken")
                self.workload.feed(chunk)
                await asyncio.sleep(2.0)  # let the new jobs reach the nodes: faults hit work
                self.results.append(await self._fault(name))
            stop.set()
            await submitting
            final = await self._final()
        finally:
            stop.set()
            if not submitting.done():
                submitting.cancel()
            await self.stop()
        return {
            "phase": cfg.name,
            "brokers": cfg.brokers,
            "replication": self.settings.replication_factor,
            "min_insync_replicas": self.settings.min_insync_replicas,
            "elapsed_s": round(time.monotonic() - began, 1),
            "workload": {
                "planned_submissions": len(planned),
                "submitters": cfg.submitters,
                "sim_nodes": cfg.sim_nodes,
                "docker_agents": len(self.docker_agents),
                **self.workload.result.summary(),
            },
            "faults": [r.to_json() for r in self.results],
            "skipped": self.skipped,
            "no_ops_endpoint": sorted(self.services.no_ops),
            "service_logs": str(self.logs_kept) if self.logs_kept else None,
            "final": final,
        }

    async def _load_in_flight(self) -> bool:
        assert self.workload is not None
        return self.workload.queue.qsize() <= self.config.submitters

    async def _fault(self, name: str) -> FaultResult:
        parts = members(name)
        self.say(f"[{self.config.name}] fault {name}: {', '.join(parts)}")
        since = time.monotonic()
        restarts_before, caused_before = self.services.restarts(), dict(self.services.caused)
        result = FaultResult(name, parts, utcnow().isoformat(), [])
        outcomes = await asyncio.gather(
            *(FAULTS[p].inject(self) for p in parts), return_exceptions=True
        )
        details = [
            f"{p}: the injection itself failed: {o!r}" if isinstance(o, BaseException) else o
            for p, o in zip(parts, outcomes, strict=True)
        ]
        result.detail = details
        for line in details:
            self.say(f"    {line}")
        healed = time.monotonic()
        ends = await self._end_offsets_retrying()
        names = list(self.services.specs)
        timings = await asyncio.gather(
            *(self._timed(self._ready_check(n), healed) for n in names),
            self._timed(lambda: self._sink_caught_up(ends), healed),
            self._timed_once(self._probe_job(docker=False), healed),
            self._timed_once(self._probe_job(docker=True), healed),
        )
        result.recovery_s = {"fault_s": round(healed - since, 2)}
        result.recovery_s.update({f"{n}_ready": t for n, t in zip(names, timings, strict=False)})
        sink, sim, docker = timings[len(names) :]
        result.recovery_s["sink_caught_up"] = sink
        result.recovery_s["new_job_on_simulated_node_ended"] = sim
        result.recovery_s["new_job_on_docker_agent_ended"] = docker
        after = self.services.restarts()
        result.restarts = {
            n: after[n] - restarts_before.get(n, 0)
            for n in after
            if after[n] > restarts_before.get(n, 0)
        }
        for n, count in result.restarts.items():
            caused = self.services.caused[n] - caused_before.get(n, 0)
            if count > caused:
                result.unexpected_exits.append(f"{n} ({count - caused} crash(es))")
        verdict = await self._check(settle_s=SETTLE_S)
        result.check = verdict.summary()
        if self.config.verify_after_each:
            result.verify = await self._verify()
        self.say(
            f"    recovered: {_fmt(result.recovery_s)}; restarts {result.restarts or 'none'}; "
            f"crashed on their own: {result.unexpected_exits or 'none'}; "
            f"invariants {'ok' if verdict.ok else 'VIOLATED'}"
        )
        for finding in verdict.findings[:5]:
            self.say(f"      {finding.line()}")
        return result

    def _ready_check(self, name: str) -> Callable[[], Any]:
        async def ready() -> bool:
            return await asyncio.to_thread(self.services.ready, name)

        return ready

    async def _end_offsets_retrying(self) -> dict[TopicPartition, int]:
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            try:
                return await self._end_offsets()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1.0)

    async def _check(self, settle_s: float) -> Verdict:
        assert self.workload is not None
        # What was acknowledged before the ledger is read must all be in what is read.
        acks = Acks(
            event_ids=self.workload.result.acks.event_ids | self._sim_acks(),
            jobs=dict(self.workload.result.acks.jobs),
        )
        snap = await collect.snapshot(self.settings)
        return check(snap, acks, self.timings, settle_s=settle_s)

    def _sim_acks(self) -> set[str]:
        try:
            text = self.sim_acks_file.read_text()
        except FileNotFoundError:
            return set()
        # A line cut by a SIGKILL mid-write is not a whole id: only complete lines count.
        return {line for line in text.split("\n")[:-1] if line}

    async def _final(self) -> dict[str, Any]:
        assert self.workload is not None
        jobs = set(self.workload.result.acks.jobs)
        self.say(f"[{self.config.name}] submissions done; waiting for {len(jobs)} jobs to end")
        drain_began = time.monotonic()
        deadline = drain_began + max(
            RECOVERY_TIMEOUT_S, TIMINGS.thresholds.dispatch_timeout_s + 120 + TIMINGS.slack_s
        )
        while time.monotonic() < deadline:
            if await self._all_terminal(jobs):
                break
            await asyncio.sleep(2.0)
        # Let the processors and the sink publish the last accounting records.
        await asyncio.sleep(5.0)
        verdict = await self._check(settle_s=0.0)
        verify = await self._verify()
        self.say(
            f"[{self.config.name}] final: {verdict.terminal}/{verdict.jobs} jobs ended, "
            f"{verdict.events} events; lost {verdict.lost}, stuck {verdict.stuck}, "
            f"double-billed {verdict.double_billed}; replay --verify exit {verify['exit']}"
        )
        return {
            "drain_s": round(time.monotonic() - drain_began, 1),
            "check": verdict.summary(),
            "replay_verify": verify,
        }

    async def _all_terminal(self, jobs: set[str]) -> bool:
        """Whether the read models show every job terminal (cheap; the ledger is checked after)."""
        try:
            conn = await asyncpg.connect(self.settings.dsn, timeout=5)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        try:
            ended = await conn.fetchval(
                f'SELECT count(*) FROM "{self.settings.pg_schema}".jobs '
                "WHERE job_id = ANY($1::text[]) AND status = ANY($2::text[])",
                sorted(jobs),
                sorted(TERMINAL_STATUSES),
            )
        except asyncpg.PostgresError:
            return False
        finally:
            await conn.close()
        return bool(ended == len(jobs))

    async def _verify(self) -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.cli.main",
            "replay",
            "--verify",
            env={**os.environ, **settings_env(self.settings)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        lines = out.decode(errors="replace").splitlines()
        tables_equal = not any(line.startswith("DIFF") for line in lines)
        return {"exit": proc.returncode, "tables_equal_replay": tables_equal, "lines": lines[-25:]}


def _split(items: list[Planned], parts: int) -> list[list[Planned]]:
    size = -(-len(items) // parts) if items else 0
    return [items[i * size : (i + 1) * size] for i in range(parts)]


def _fmt(recovery: dict[str, float | None]) -> str:
    return ", ".join(
        f"{k} {'-' if v is None else f'{v:.1f}s'}" for k, v in recovery.items() if k != "fault_s"
    )


async def run_suite(
    shared: Settings, phases: tuple[PhaseConfig, ...], say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the phases one after the other (each on its own private stack); the report."""
    started = utcnow()
    began = time.monotonic()
    results = []
    for config in phases:
        results.append(await Phase(shared, config, say).run())
    from services.chaos.report import summarize

    return summarize(results, started, time.monotonic() - began)
