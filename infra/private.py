"""A private local stack: its own home and free ports, beside the shared one.

Whatever kills brokers or Postgres on purpose (the chaos suite, the broker
fault tests) runs on one of these, never on the stack everyone else uses. The
Kafka jars of the shared home are linked and its SeaweedFS binary reused, not
fetched or built again; the Docker daemon is shared (it is only ever asked to
run and remove containers).
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

from infra import kafka, seaweedfs
from infra.kafka import KafkaPaths
from services.ops.specs import free_ports
from services.settings import Settings


def free_s3_base() -> int:
    """A base port for a private object store: it, the next three ports and each of them
    + 10000 are free (SeaweedFS's S3, master, volume and filer, and their gRPC ports)."""
    for _ in range(100):
        (base,) = free_ports(1)
        if base > 65535 - 10003:
            continue
        ports = seaweedfs.Ports(base, base + 1, base + 2, base + 3).all()
        if all(_bindable(p) for p in ports):
            return base
    raise RuntimeError("no free port range for a private object store")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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
    """Settings of a stack in ``home`` on free ports: ``brokers`` Kafka nodes, Postgres and
    the object store.

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
        "s3_port": free_s3_base(),
        "s3_endpoint": "",
        "s3_credentials_file": None,
        # The shared home's binary when it has one (else this stack's `up` builds one).
        "weed_binary": seaweedfs.SeaweedPaths.of(shared).binary
        if seaweedfs.binary_cached(shared)
        else None,
        **overrides,
    }
    return shared.model_copy(update=update)
