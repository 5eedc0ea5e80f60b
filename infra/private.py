"""A private local stack: its own home and free ports, beside the shared one.

Whatever kills brokers or Postgres on purpose (the chaos suite, the broker
fault tests) runs on one of these, never on the stack everyone else uses. The
Kafka jars of the shared home are linked, not fetched again; the Docker daemon
is shared (it is only ever asked to run and remove containers).
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

from infra import kafka
from infra.kafka import KafkaPaths
from services.settings import Settings


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


def new_home(prefix: str = "gl-private-") -> Path:
    """A fresh home folder readable by the postgres user (Postgres runs as that user)."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)
    return home


def link_jars(shared: Settings, home: Path) -> bool:
    """Link the shared home's Kafka jars into ``home``; False when the shared home has none."""
    lib = KafkaPaths.of(shared).lib
    if not (lib / kafka.KAFKA_JAR).is_file():
        return False
    target = home / "kafka" / "lib"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(lib)
    return True


def private_settings(
    shared: Settings, home: Path, brokers: int = 1, **overrides: object
) -> Settings:
    """Settings of a stack in ``home`` on free ports: ``brokers`` Kafka nodes and Postgres.

    Everything else (partitions, timings) is taken from ``shared``; the API gets a
    free port too, so services started on this stack never collide with 8600.
    """
    ports = free_ports(2 * brokers + 2)
    broker_ports, controller_ports = ports[:brokers], ports[brokers : 2 * brokers]
    pg_port, api_port = ports[2 * brokers :]
    update: dict[str, object] = {
        "home": home,
        "kafka_brokers": brokers,
        "kafka_bootstrap": ",".join(f"127.0.0.1:{p}" for p in broker_ports),
        "kafka_controller_port": controller_ports[0],
        "kafka_controller_ports": ",".join(map(str, controller_ports)) if brokers > 1 else "",
        "pg_port": pg_port,
        "pg_dsn": "",
        "api_port": api_port,
        "api_url": "",
        "tokens_file": None,
        **overrides,
    }
    return shared.model_copy(update=update)
