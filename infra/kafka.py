"""The local KRaft Kafka cluster run from Maven Central jars.

See docs/architecture.md, "The local stack".

By default one combined broker+controller node. Layout under ``<home>/kafka``:
``lib/`` (jars, fetched once by Maven), ``server.properties``,
``log4j.properties``, ``cluster.id``, ``data/`` (log dirs) and ``kafka.pid``.
Broker logs go to ``<home>/logs/kafka.log``.

With ``kafka_brokers=N`` (``gridledger dev up --brokers 3``) it runs N combined
broker+controller nodes: every node is a broker and a voter of the controller
quorum, so the cluster survives the loss of any one node (2 of 3 voters keep a
quorum, 2 of 3 replicas keep ``min.insync.replicas``). Node i listens on the
i-th address of ``kafka_bootstrap`` and its controller port, and lives in
``<home>/kafka/cluster-N/node-i/`` (``server.properties``, ``data/``,
``kafka.pid``; log ``<home>/logs/kafka-i.log``); the N nodes share one
``cluster.id`` and the jars. The single-node layout and an N-node layout are
separate clusters in one home; only one of them runs at a time.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from infra import processes
from infra.status import ComponentStatus
from schemas.errors import StackError
from services.settings import Settings

POM = Path(__file__).parent / "kafka" / "pom.xml"
HEAP = "512m"
QUIET_LOGGERS = (
    "kafka.request.logger",
    "state.change.logger",
    "org.apache.kafka.clients",
    "kafka.log",
    "org.apache.kafka.storage.internals.log",
    "kafka.cluster.Partition",
    "org.apache.kafka.controller.ReplicationControlManager",
    "org.apache.kafka.controller.ConfigurationControlManager",
    "kafka.server.metadata.DynamicConfigPublisher",
    "kafka.server.ReplicaFetcherManager",
    "kafka.server.ReplicaAlterLogDirsManager",
)
KAFKA_JAR = "kafka_2.13-3.9.1.jar"
"""Present in ``lib/`` when the fetch completed."""


@dataclass(frozen=True)
class KafkaPaths:
    """Where one broker keeps its jars, data, configuration, pid and log, under the home."""

    root: Path
    lib: Path
    data: Path
    config: Path
    log4j: Path
    cluster_id: Path
    pid_file: Path
    log: Path

    @classmethod
    def of(cls, settings: Settings) -> KafkaPaths:
        """Paths of the single-node layout (the default stack)."""
        root = settings.home / "kafka"
        return cls(
            root=root,
            lib=root / "lib",
            data=root / "data",
            config=root / "server.properties",
            log4j=root / "log4j.properties",
            cluster_id=root / "cluster.id",
            pid_file=root / "kafka.pid",
            log=settings.logs_dir / "kafka.log",
        )

    @classmethod
    def of_node(cls, settings: Settings, node_id: int, brokers: int) -> KafkaPaths:
        """Paths of node ``node_id`` of an N-node cluster (N > 1)."""
        cluster = settings.home / "kafka" / f"cluster-{brokers}"
        root = cluster / f"node-{node_id}"
        return cls(
            root=root,
            lib=settings.home / "kafka" / "lib",
            data=root / "data",
            config=root / "server.properties",
            log4j=root / "log4j.properties",
            cluster_id=cluster / "cluster.id",
            pid_file=root / "kafka.pid",
            log=settings.logs_dir / f"kafka-{node_id}.log",
        )


@dataclass(frozen=True)
class KafkaNode:
    """One combined broker+controller node of the local cluster."""

    node_id: int
    host: str
    port: int
    controller_port: int
    paths: KafkaPaths
    name: str
    """``kafka`` for the single node, ``kafka-<i>`` in an N-node cluster (dev status)."""

    @property
    def address(self) -> str:
        """``host:port`` as clients bootstrap from it."""
        return f"{self.host}:{self.port}"


def _addresses(settings: Settings) -> list[tuple[str, int]]:
    addresses = []
    for entry in settings.kafka_bootstrap.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise StackError(
                f"GRIDLEDGER_KAFKA_BOOTSTRAP={settings.kafka_bootstrap!r} is not a list of "
                "host:port; set it to e.g. 127.0.0.1:9092"
            )
        addresses.append((host, int(port)))
    return addresses


def cluster_nodes(settings: Settings) -> list[KafkaNode]:
    """The nodes of this home's local cluster, from the settings.

    One node: the first bootstrap address and ``kafka_controller_port``. N nodes:
    ``kafka_bootstrap`` lists N addresses (one given address derives the others,
    two ports apart: 9092, 9094, 9096) and ``kafka_controller_ports`` N ports
    (empty derives ``kafka_controller_port`` + 0, 2, 4: 9093, 9095, 9097).

    Raises:
        StackError: the lists do not match ``kafka_brokers``, naming the variable.
    """
    addresses = _addresses(settings)
    brokers = settings.kafka_brokers
    if brokers == 1:
        host, port = addresses[0]
        return [
            KafkaNode(
                1, host, port, settings.kafka_controller_port, KafkaPaths.of(settings), "kafka"
            )
        ]
    if len(addresses) == 1:
        host, port = addresses[0]
        addresses = [(host, port + 2 * i) for i in range(brokers)]
    if len(addresses) != brokers:
        raise StackError(
            f"GRIDLEDGER_KAFKA_BOOTSTRAP lists {len(addresses)} addresses but "
            f"GRIDLEDGER_KAFKA_BROKERS={brokers}; list one host:port per broker (or just one "
            "to derive the others)"
        )
    if settings.kafka_controller_ports.strip():
        try:
            controllers = [int(p) for p in settings.kafka_controller_ports.split(",")]
        except ValueError:
            controllers = []
        if len(controllers) != brokers:
            raise StackError(
                f"GRIDLEDGER_KAFKA_CONTROLLER_PORTS={settings.kafka_controller_ports!r} must "
                f"list {brokers} ports, one per broker (or be empty to derive them)"
            )
    else:
        controllers = [settings.kafka_controller_port + 2 * i for i in range(brokers)]
    return [
        KafkaNode(
            i + 1,
            host,
            port,
            controllers[i],
            KafkaPaths.of_node(settings, i + 1, brokers),
            f"kafka-{i + 1}",
        )
        for i, (host, port) in enumerate(addresses)
    ]


def node(settings: Settings, node_id: int) -> KafkaNode:
    """Node ``node_id`` (1-based) of this home's cluster."""
    nodes = cluster_nodes(settings)
    if not 1 <= node_id <= len(nodes):
        raise StackError(f"the local cluster has nodes 1..{len(nodes)}, not {node_id}")
    return nodes[node_id - 1]


def broker_address(settings: Settings) -> tuple[str, int]:
    """Host and port of the local broker: the first entry of ``kafka_bootstrap``."""
    return _addresses(settings)[0]


def render_server_properties(settings: Settings, node_id: int = 1) -> str:
    """``server.properties`` of one combined broker+controller node bound to 127.0.0.1 only."""
    nodes = cluster_nodes(settings)
    me = nodes[node_id - 1]
    controller = f"{me.host}:{me.controller_port}"
    replicas = str(min(settings.replication_factor, len(nodes)))
    min_isr = str(min(settings.min_insync_replicas, len(nodes)))
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(me.node_id),
        # Static voters (formatted without --standalone): every node of the cluster.
        "controller.quorum.voters": ",".join(
            f"{n.node_id}@{n.host}:{n.controller_port}" for n in nodes
        ),
        "listeners": f"PLAINTEXT://{me.host}:{me.port},CONTROLLER://{controller}",
        "advertised.listeners": f"PLAINTEXT://{me.host}:{me.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(me.paths.data),
        "num.partitions": "1",
        # Topics are created explicitly with their partition counts (services.ledger.topics).
        "auto.create.topics.enable": "false",
        "default.replication.factor": replicas,
        # An acks=all append is acknowledged once this many replicas have it (2 of 3).
        "min.insync.replicas": min_isr,
        # Only an in-sync replica may become leader: an acknowledged append is never lost.
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": replicas,
        # Fewer coordinator partitions than the default 50: the first consumer group
        # of a fresh dev broker is ready sooner, nothing else changes on one node.
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        # Consumers in tests join one at a time; waiting 3 s per rebalance only slows them.
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.hours": "168",
        "delete.topic.enable": "true",
    }
    header = "# Generated by `gridledger dev up` (infra/kafka.py); edits are overwritten.\n"
    return header + "".join(f"{key}={value}\n" for key, value in lines.items())


def render_log4j(settings: Settings, node_id: int = 1) -> str:
    """reload4j configuration sending every logger of a node to its log file under logs/."""
    log = node(settings, node_id).paths.log
    return (
        "# Generated by `gridledger dev up` (infra/kafka.py).\n"
        "log4j.rootLogger=INFO, file\n"
        "log4j.appender.file=org.apache.log4j.RollingFileAppender\n"
        f"log4j.appender.file.File={log}\n"
        "log4j.appender.file.Append=true\n"
        "log4j.appender.file.MaxFileSize=50MB\n"
        "log4j.appender.file.MaxBackupIndex=3\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        # Tests create and delete topics all day; these loggers write several INFO
        # lines per partition each time and would bury everything else.
        + "".join(f"log4j.logger.{name}=WARN\n" for name in QUIET_LOGGERS)
    )


def fetch_jars(settings: Settings) -> bool:
    """Copy the broker's runtime jars into ``<home>/kafka/lib`` with Maven. False if cached."""
    paths = KafkaPaths.of(settings)
    if (paths.lib / KAFKA_JAR).is_file():
        return False
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is not installed; install it with `apt-get install maven`")
    paths.root.mkdir(parents=True, exist_ok=True)
    pom = paths.root / "pom.xml"
    shutil.copyfile(POM, pom)
    # Fetch into a scratch folder and rename, so an interrupted fetch is never taken as cached.
    partial = paths.root / "lib.partial"
    shutil.rmtree(partial, ignore_errors=True)
    result = subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={partial}",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not (partial / KAFKA_JAR).is_file():
        output = (result.stdout + result.stderr).strip()[-3000:]
        raise StackError(
            f"Maven could not fetch the Kafka jars (exit {result.returncode}); check that Maven "
            f"Central is reachable. Maven said:\n{output}"
        )
    shutil.rmtree(paths.lib, ignore_errors=True)
    partial.rename(paths.lib)
    shutil.rmtree(paths.root / "target", ignore_errors=True)
    return True


def write_config(settings: Settings) -> None:
    """Write ``server.properties`` and ``log4j.properties`` of every node."""
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    for n in cluster_nodes(settings):
        n.paths.root.mkdir(parents=True, exist_ok=True)
        n.paths.config.write_text(render_server_properties(settings, n.node_id))
        n.paths.log4j.write_text(render_log4j(settings, n.node_id))


def new_cluster_id() -> str:
    """A random cluster id in Kafka's format: URL-safe base64 of a UUID, no padding.

    Like Kafka's ``Uuid.randomUuid()`` it never starts with ``-``, which the
    StorageTool's argument parser would take for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def format_storage(settings: Settings) -> bool:
    """Format every node's log dirs once, with one cluster id. False when all were formatted."""
    formatted = False
    for n in cluster_nodes(settings):
        paths = n.paths
        if (paths.data / "meta.properties").is_file():
            continue
        if not paths.cluster_id.is_file():
            paths.cluster_id.parent.mkdir(parents=True, exist_ok=True)
            paths.cluster_id.write_text(new_cluster_id() + "\n")
        cluster_id = paths.cluster_id.read_text().strip()
        result = subprocess.run(
            [
                *_java(settings, paths),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(paths.config),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise StackError(
                f"formatting the Kafka log dirs in {paths.data} failed "
                f"(exit {result.returncode}):\n{(result.stdout + result.stderr).strip()[-3000:]}"
            )
        formatted = True
    return formatted


def _java(settings: Settings, paths: KafkaPaths | None = None) -> list[str]:
    paths = paths or KafkaPaths.of(settings)
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "Java is not installed; install it with `apt-get install openjdk-17-jre-headless`"
        )
    return [
        java,
        f"-Xmx{HEAP}",
        f"-Xms{HEAP}",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{paths.log4j}",
        f"-Dkafka.logs.dir={settings.logs_dir}",
        "-cp",
        f"{paths.lib}/*",
    ]


def node_pid(n: KafkaNode) -> int | None:
    """Pid of one node when it runs."""
    return processes.running_pid(n.paths.pid_file, str(n.paths.config))


def running_pid(settings: Settings) -> int | None:
    """Pid of this home's (first) broker when it runs."""
    return node_pid(cluster_nodes(settings)[0])


def _other_layout_running(settings: Settings) -> list[KafkaNode]:
    """Nodes of this home's other cluster layouts that run (single node vs N nodes)."""
    mine = {n.paths.pid_file for n in cluster_nodes(settings)}
    others = []
    for brokers in range(1, 10):
        if brokers == settings.kafka_brokers:
            continue
        layout = settings.model_copy(update={"kafka_brokers": brokers})
        try:
            nodes = cluster_nodes(layout)
        except StackError:
            nodes = [
                KafkaNode(i, "", 0, 0, KafkaPaths.of_node(settings, i, brokers), f"kafka-{i}")
                for i in range(1, brokers + 1)
            ]
        others += [n for n in nodes if n.paths.pid_file not in mine and node_pid(n) is not None]
    return others


def start_node(settings: Settings, n: KafkaNode) -> int:
    """Start one node detached and return its pid (not yet ready: see :func:`wait_ready`)."""
    for busy in (n.port, n.controller_port):
        if processes.port_open(n.host, busy):
            raise StackError(
                f"port {n.host}:{busy} is already in use by a process this gridledger home did "
                f"not start ({n.paths.pid_file} names no running broker); stop that process or "
                "choose other ports with GRIDLEDGER_KAFKA_BOOTSTRAP and "
                "GRIDLEDGER_KAFKA_CONTROLLER_PORT(S)"
            )
    return processes.start_detached(
        [*_java(settings, n.paths), "kafka.Kafka", str(n.paths.config)],
        log_file=n.paths.log,
        pid_file=n.paths.pid_file,
        cwd=n.paths.root,
    )


def start(settings: Settings) -> int:
    """Start the (first) broker detached and return its pid."""
    return start_node(settings, cluster_nodes(settings)[0])


async def wait_ready(
    settings: Settings,
    timeout: float = 90.0,
    pid: int | None = None,
    pids: dict[int, int] | None = None,
) -> dict[str, Any]:
    """Wait until every broker answers and the cluster lists them all; ``describe_cluster()``.

    ``pid`` (the single node's) or ``pids`` (node id -> pid) are watched: a node
    whose process exits fails the wait at once.

    Raises:
        StackError: the cluster was not complete within ``timeout`` seconds, or a
            watched process exited; the message points at the log.
    """
    nodes = cluster_nodes(settings)
    watched = dict(pids or {})
    if pid is not None:
        watched[nodes[0].node_id] = pid
    log = nodes[0].paths.log
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        for node_id, watched_pid in watched.items():
            if not processes.is_alive(watched_pid):
                node_log = nodes[node_id - 1].paths.log
                raise StackError(
                    f"the Kafka broker {node_id} (pid {watched_pid}) exited while starting; "
                    f"see {node_log}:\n{processes.log_tail(node_log)}"
                )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        # Until the ports open a metadata request can only fail (and aiokafka logs each try).
        closed = [n for n in nodes if not processes.port_open(n.host, n.port)]
        if closed:
            last_error = ConnectionRefusedError(f"nothing listens on {closed[0].address} yet")
            await asyncio.sleep(min(0.2, remaining))
            continue
        try:
            return await asyncio.wait_for(
                _describe_cluster(settings, len(nodes)), timeout=min(remaining, 10)
            )
        except (KafkaError, OSError, TimeoutError, StackError) as exc:
            last_error = exc
        await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    raise StackError(
        f"Kafka at {settings.kafka_bootstrap} did not answer a metadata request within "
        f"{timeout:.0f} s (last error: {last_error!r}); see {log}"
    )


async def _describe_cluster(settings: Settings, brokers: int = 1) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        listed = len(cluster.get("brokers") or [])
        if listed < brokers:
            raise StackError(f"the cluster lists {listed} of {brokers} brokers yet")
        await admin.list_topics()
        return cluster
    finally:
        await admin.close()


def node_status(settings: Settings, n: KafkaNode) -> ComponentStatus:
    """Whether this broker runs (its pid) and listens, for `dev status`."""
    pid = node_pid(n)
    return ComponentStatus(
        name=n.name,
        running=pid is not None and processes.port_open(n.host, n.port),
        address=f"{n.address} (controller {n.host}:{n.controller_port})",
        pid=pid,
        log=n.paths.log,
        started_by_us=pid is not None,
        detail="" if pid is not None else "not running",
    )


def statuses(settings: Settings) -> list[ComponentStatus]:
    """One line per node of this home's cluster (``kafka``, or ``kafka-1`` .. ``kafka-N``)."""
    return [node_status(settings, n) for n in cluster_nodes(settings)]


def status(settings: Settings) -> ComponentStatus:
    """The first node's status (the only one of the default single-node stack)."""
    return statuses(settings)[0]


async def up(settings: Settings, timeout: float = 90.0) -> list[ComponentStatus]:
    """Start the nodes that do not run; then wait until the whole cluster answers.

    Raises:
        StackError: a node of another layout of this home runs (its ports and its
            topics are another cluster's), or the cluster did not become ready.
    """
    began = time.monotonic()
    others = _other_layout_running(settings)
    if others:
        raise StackError(
            f"this home already runs another Kafka cluster layout ({others[0].paths.config}); "
            f"stop it with `gridledger dev down` before `dev up --brokers "
            f"{settings.kafka_brokers}`"
        )
    nodes = cluster_nodes(settings)
    running = {n.node_id: pid for n in nodes if (pid := node_pid(n)) is not None}
    if len(running) == len(nodes):
        await wait_ready(settings, timeout, pids=running)
        return _with_detail(settings, "already running, answered a metadata request")
    fetched = await asyncio.to_thread(fetch_jars, settings)
    write_config(settings)
    formatted = await asyncio.to_thread(format_storage, settings)
    started = {}
    for n in nodes:
        if n.node_id not in running:
            started[n.node_id] = await asyncio.to_thread(start_node, settings, n)
    await wait_ready(settings, timeout, pids={**running, **started})
    steps = ["jars fetched" if fetched else "jars cached"]
    if formatted:
        steps.append("storage formatted")
    steps.append(f"started and ready in {time.monotonic() - began:.1f} s")
    return _with_detail(settings, ", ".join(steps), only=set(started))


def stop_node(n: KafkaNode, timeout: float = 60) -> int | None:
    """Stop one node if it runs (controlled shutdown, SIGKILL after ``timeout``); its pid."""
    pid = node_pid(n)
    if pid is not None:
        processes.stop(pid, timeout=timeout, cmdline_marker=str(n.paths.config))
    n.paths.pid_file.unlink(missing_ok=True)
    return pid


def down(settings: Settings) -> list[ComponentStatus]:
    """Stop every node of this home's cluster that runs, all at once (data is kept).

    Nodes stop in parallel: stopped one by one, the last ones would wait for a
    controller quorum that is already gone.
    """
    # Also what runs of another layout of this home (an `up --brokers N` that failed
    # half-way never wrote stack.env, so the settings may name the previous layout).
    nodes = cluster_nodes(settings) + _other_layout_running(settings)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        pids = list(pool.map(stop_node, nodes))
    return [
        dataclasses.replace(
            node_status(settings, n), detail=f"stopped pid {pid}" if pid else "was not running"
        )
        for n, pid in zip(nodes, pids, strict=True)
    ]


def _with_detail(
    settings: Settings, detail: str, only: set[int] | None = None
) -> list[ComponentStatus]:
    """Every node's status; ``detail`` on the nodes in ``only`` (all when None)."""
    return [
        dataclasses.replace(
            node_status(settings, n),
            detail=detail if only is None or n.node_id in only else "already running",
        )
        for n in cluster_nodes(settings)
    ]
