"""One settings object for every gridledger service.

Every value comes from an environment variable with the ``GRIDLEDGER_`` prefix
(``GRIDLEDGER_KAFKA_BOOTSTRAP``, ``GRIDLEDGER_PG_DSN``, ...). ``gridledger dev up``
writes the values it chose (for example the Postgres port) to
``<home>/stack.env``; :func:`load_settings` reads that file first so that every
service started on this machine finds the local stack without extra flags.
Explicit environment variables always win over the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.topics import TOPIC_NAMES
from services.backoff import Backoff


def default_home() -> Path:
    """Folder for local state: jars, broker data, Postgres cluster, object store, spool, logs."""
    return Path(os.environ.get("GRIDLEDGER_HOME", Path.cwd() / ".gridledger")).resolve()


class Settings(BaseSettings):
    """Settings shared by all services; read from ``GRIDLEDGER_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="GRIDLEDGER_", extra="ignore", frozen=True)

    home: Path = Field(default_factory=default_home)
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_controller_port: int = 9093
    topic_prefix: str = "gridledger."
    job_partitions: int = Field(6, ge=1, description="partitions of job-keyed topics")
    node_partitions: int = Field(6, ge=1, description="partitions of node-keyed topics")
    kafka_brokers: int = Field(
        1,
        ge=1,
        le=9,
        description="brokers of the local KRaft cluster `dev up` runs (`dev up --brokers 3`); "
        "each is a combined broker+controller node, node i at the i-th bootstrap address",
    )
    kafka_controller_ports: str = ""
    """Controller ports of a multi-broker local cluster, comma-separated, node i first;
    empty derives ``kafka_controller_port + 2*(i-1)``."""
    topic_replication: int | None = Field(
        None,
        ge=1,
        description="replication factor of new topics; default min(3, kafka_brokers)",
    )
    # ---- talking to the broker and Postgres securely (services/transport.py, README
    # "Security model"); the defaults suit the dev stack on 127.0.0.1 only.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How every Kafka client of every service connects: TLS (``SSL``), SASL, or both."""
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    kafka_sasl_username: str = ""
    kafka_sasl_password: SecretStr = SecretStr("")
    kafka_ssl_cafile: Path | None = None
    """CA bundle the broker's certificate must chain to; unset: the system's CAs."""
    kafka_ssl_certfile: Path | None = None
    """Client certificate (PEM) for brokers that require mutual TLS."""
    kafka_ssl_keyfile: Path | None = None
    """The client certificate's private key (PEM); unset: it is in the certificate file."""
    kafka_ssl_check_hostname: bool = True
    """Check that the broker's certificate names the host connected to."""
    pg_port: int = 55432
    pg_dsn: str = ""
    """Postgres DSN; empty means the local dev cluster on 127.0.0.1:``pg_port``."""
    pg_password: SecretStr = SecretStr("")
    """Postgres password, kept out of the DSN (which is logged, redacted or not)."""
    pg_sslmode: Literal["", "disable", "prefer", "require", "verify-ca", "verify-full"] = ""
    """TLS to Postgres as libpq names it; empty: what the DSN says (asyncpg: ``prefer``)."""
    pg_sslrootcert: Path | None = None
    """CA the server's certificate must chain to (``verify-ca``, ``verify-full``)."""
    api_host: str = "127.0.0.1"
    api_port: int = 8600
    tokens_file: Path | None = None
    """JSON file {token: tenant}; default ``<home>/tokens.json`` written by ``dev up``."""
    docker_host: str = ""
    """Docker daemon address; empty means the environment's default (unix socket)."""
    debian_mirror: str = "http://deb.debian.org/debian"
    """Debian mirror debootstrap uses to build the local ``gridledger/python`` image."""
    kafka_max_message_bytes: int = Field(
        1024 * 1024,
        ge=64 * 1024,
        description="largest record a topic takes (each topic's max.message.bytes) and the "
        "producer sends (its max_request_size): a larger one is refused, never retried",
    )
    # ---- scheduler (issue 5)
    scheduler_node_timeout_s: float = Field(
        30.0, gt=0, description="a node silent (no NodeHeartbeat) this long is not placeable"
    )
    scheduler_dispatch_timeout_s: float = Field(
        60.0, gt=0, description="time a node has to accept a scheduled attempt"
    )
    scheduler_tick_s: float = Field(0.25, gt=0, description="placement/deadline check period")
    scheduler_retry_fallback_s: float = Field(
        5.0,
        ge=0,
        description="how long a retry waits for a node it was not told to avoid before it "
        "falls back to the avoided provider, then the avoided node (never a silent or "
        "suspect one)",
    )
    scheduler_snapshot_s: float = Field(
        30.0,
        ge=0,
        description="how often the leading scheduler writes its state to scheduler-state, "
        "which a start reads before the tail of the topics (0: never, and a start refolds "
        "node-events and job-events from offset 0)",
    )
    scheduler_lease_timeout_s: float = Field(
        6.0,
        ge=1.0,
        description="how long a scheduler that stopped heartbeating (killed, cut off) "
        "keeps the lead before its standby takes over: the lease group's session timeout "
        "(the broker refuses one below its group.min.session.timeout.ms, 6 s by default)",
    )
    # ---- processors (issue 5)
    processors_app_id: str = "gridledger-processors"
    """Faust app id (= consumer group) prefix; the topic prefix and the processor set are added."""
    watchdog_silence_s: float = Field(
        30.0, gt=0, description="heartbeat silence after which an attempt is unresponsive"
    )
    watchdog_lost_after_s: float = Field(
        60.0, gt=0, description="further silence after which an unresponsive attempt is lost"
    )
    watchdog_finishing_timeout_s: float = Field(
        300.0, gt=0, description="time from ProcessExited to ComputeReleased before giving up"
    )
    watchdog_tick_s: float = Field(0.5, gt=0, description="deadline check period")
    watchdog_lag_threshold_s: float = Field(
        5.0,
        gt=0,
        description="the watchdog is deaf (counts no silence, gives no verdict) while the "
        "heartbeats it has processed trail what the broker holds by more than this, or it "
        "cannot reach the broker; capped at half of watchdog_silence_s",
    )
    processors_session_timeout_s: float = Field(
        30.0,
        ge=6,
        description="consumer-group session timeout: how long a killed worker's partitions "
        "wait before another worker takes them over",
    )
    processors_heartbeat_interval_s: float = Field(3.0, gt=0, description="group heartbeats")
    processors_keep_settled: int = Field(
        4096,
        ge=0,
        description="settled jobs (terminal, accounted for) a processors worker keeps in "
        "memory, the latest settled; an older one's history is dropped and reloaded from the "
        "ledger if a record for it arrives (about 50 KiB per job held)",
    )

    # ---- riding out outages (services/backoff.py)
    reconnect_initial_s: float = Field(
        0.2, gt=0, description="first wait before retrying an unreachable broker or Postgres"
    )
    reconnect_max_s: float = Field(
        10.0, gt=0, description="longest wait between two retries (the backoff's cap)"
    )

    pg_schema: str = "gridledger"
    """Postgres schema of the sink's read models (tests and replay use their own)."""
    api_url: str = ""
    """Base URL the CLI calls; empty means ``http://api_host:api_port``."""
    api_max_body_bytes: int = Field(1024 * 1024, ge=1024)
    """Largest request body the API reads; larger bodies get a 413 before they are read."""
    api_max_spec_bytes: int = Field(128 * 1024, ge=1024, le=512 * 1024)
    """Largest encoded spec a submit may carry (a 422 above): the spec is copied into
    Kafka records (JobSubmitted, AttemptScheduled, the job's view) under the broker's
    1 MiB limit, and the view needs room for its attempts."""
    api_id_key: str = ""
    """Key of the HMAC that derives a keyed submit's job id from its Idempotency-Key;
    empty: read ``api_id_key_file``. Every API replica must have the same key."""
    api_id_key_file: Path | None = None
    """File holding that key; default ``<home>/api-id-key``, created (0600, random) by the
    first API that finds none."""
    api_submit_visible_s: float = Field(3.0, ge=0)
    """How long ``POST /v1/jobs`` waits for the sink to record the job (read-your-writes)."""
    api_append_timeout_s: float = Field(5.0, gt=0)
    """How long a write (submit, cancel) waits for the broker before it is a 503."""
    api_retry_after_s: int = Field(5, ge=1)
    """``Retry-After`` of a 503: when a client should try again."""
    log_follow_grace_s: float = Field(2.0, ge=0)
    """After a followed job turns terminal, keep streaming late log chunks this long."""
    events_poll_s: float = Field(0.5, gt=0)
    """How often the API's one shared tail of ``job_events`` looks for new rows while any
    ``GET /v1/events`` stream is open."""
    events_heartbeat_s: float = Field(15.0, gt=0)
    """A quiet event stream gets a comment line this often, so proxies keep it open."""
    events_stream_max_s: float = Field(900.0, gt=0)
    """An event stream ends after this long; the client reconnects with ``Last-Event-ID``
    (so no connection is held forever)."""
    events_streams_per_tenant: int = Field(8, ge=1)
    """Open event streams one tenant may hold on one API process; the next is a 429."""
    events_streams_max: int = Field(256, ge=1)
    """Open event streams of all tenants on one API process; the next is a 429."""
    events_buffer: int = Field(1000, ge=1)
    """Events waiting for one slow stream; past it the stream reads on from Postgres."""
    sink_batch_max: int = Field(2000, ge=1)
    """Records the sink writes (rows and offsets) in one transaction; small when traffic is."""
    sink_lock_wait_s: float = Field(10.0, ge=0)
    """How long a starting sink waits for the schema's lock (a crashed predecessor's
    session may hold it briefly) before refusing to run beside another sink."""
    """Records the sink applies per Postgres transaction."""
    # ---- the notary (services/notary, README "Audit")
    notary_key_file: Path | None = None
    """The notary's Ed25519 signing key (PEM, 0600, ``gridledger audit keygen``); default
    ``<home>/notary/notary.key``. Its public keys: ``notary_keys_dir``."""
    notary_keys_dir: Path | None = None
    """Public keys whose seals the notary chains onto and ``audit verify`` accepts, one
    ``<key id>.pub`` each (a rotation keeps the old one); default ``<home>/notary/keys``."""
    notary_seal_records: int = Field(
        500, ge=1, le=4000, description="records of one partition a seal covers at most"
    )
    notary_seal_interval_s: float = Field(
        10.0, gt=0, description="longest a record waits before a seal covers it"
    )
    # ---- operations (services/ops)
    ops_host: str = "127.0.0.1"
    ops_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="this process's ops HTTP port (/healthz, /readyz, /metrics); 0 = off",
    )
    ops_max_lag: int = Field(
        10_000, ge=0, description="consumer lag (records) above which /readyz answers 503"
    )
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per log line, with job_id, attempt and event_id when known."""
    # ---- artifact store: S3-compatible (the local stack runs SeaweedFS)
    s3_endpoint: str = ""
    """S3 endpoint URL (AWS, GCS interoperability, Ceph RGW ...); empty means the local
    SeaweedFS that ``dev up`` runs on 127.0.0.1:``s3_port``."""
    s3_public_endpoint: str = ""
    """The store's address as users reach it, for the download URLs the API signs (a
    signature covers the host); empty means the same as the services use."""
    s3_port: int = Field(8333, ge=1, le=65535 - 10003)
    """S3 port of the local SeaweedFS; its master, volume and filer servers listen on the
    next three ports, and each server's gRPC port is its HTTP port + 10000."""
    weed_binary: Path | None = None
    """A prebuilt SeaweedFS ``weed`` (with its ``weed.version`` stamp beside it); default
    ``<home>/bin/weed``, built by ``dev up`` when missing."""
    s3_region: str = "us-east-1"
    s3_bucket: str = "gridledger"
    """One bucket; each tenant's objects live under ``tenants/<tenant>/``."""
    s3_credentials_file: Path | None = None
    """JSON file of per-tenant S3 credentials; default ``<home>/s3-credentials.json``,
    written by ``dev up`` (format in services/objectstore.py)."""
    s3_addressing_style: Literal["path", "virtual", "auto"] = "path"
    """``path`` (bucket in the URL path) suits SeaweedFS, Ceph and GCS; ``virtual`` for AWS."""
    s3_max_attempts: int = Field(5, ge=1, le=20)
    """Tries per S3 request (the first included), with capped exponential backoff between."""
    s3_connect_timeout_s: float = Field(5.0, gt=0)
    s3_presign_ttl_s: int = Field(300, ge=1, le=7 * 24 * 3600)
    """Lifetime of the download URLs the API hands out."""
    artifact_retention_days: int = Field(30, ge=1)
    """Default retention of stored outputs and checkpoints; a tenant may set its own
    (``retention_days`` in the credentials file)."""

    # ---- tenants' secrets (services/secretstore.py)
    secrets_key: str = Field("", repr=False)
    """The secrets key itself (32 bytes, base64); empty: read ``secrets_key_file``."""
    secrets_key_file: Path | None = None
    """File holding the secrets key; default ``<home>/secrets.key``, written (0600) by
    ``dev up``. The API needs it; a GPU host needs only its agent token."""

    # ---- webhooks (services/webhooks)
    webhooks_allow_loopback: bool = False
    """Let webhook URLs reach 127.0.0.0/8 and ::1 (local use and tests). Off: a tenant's URL
    that names or resolves to a loopback, private, link-local (169.254.169.254) or other
    non-public address is refused, when added and again at every delivery."""
    webhooks_timeout_s: float = Field(10.0, gt=0, le=60)
    """A delivery's whole request, connect to the last byte read, before it counts as failed."""
    webhooks_disable_after: int = Field(50, ge=1)
    """Failed deliveries in a row after which a subscription is disabled, with its reason."""
    webhooks_backoff_initial_s: float = Field(1.0, gt=0)
    webhooks_backoff_cap_s: float = Field(600.0, gt=0)
    """A failing subscription's next try: capped exponential backoff between these."""
    webhooks_max_pending: int = Field(10_000, ge=1)
    """Events one subscription may have waiting; one more disables it, with the reason."""
    webhooks_log_keep: int = Field(100, ge=1, le=10_000)
    """Delivery attempts kept per subscription (the newest)."""
    webhooks_rotation_overlap_s: int = Field(24 * 3600, ge=0)
    """After a rotation, the previous secret signs too for this long (two signatures)."""
    webhooks_concurrency: int = Field(32, ge=1)
    """Subscriptions delivered to at once; each has its own queue, in order."""

    @model_validator(mode="after")
    def _check_secure_links(self) -> Settings:
        """Settings that would silently not do what they say are refused at start."""
        protocol = self.kafka_security_protocol
        if protocol.startswith("SASL") and not (
            self.kafka_sasl_username and self.kafka_sasl_password.get_secret_value()
        ):
            raise ValueError(
                f"GRIDLEDGER_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                "GRIDLEDGER_KAFKA_SASL_USERNAME and GRIDLEDGER_KAFKA_SASL_PASSWORD"
            )
        tls_files = [self.kafka_ssl_cafile, self.kafka_ssl_certfile, self.kafka_ssl_keyfile]
        if any(tls_files) and not protocol.endswith("SSL"):
            raise ValueError(
                "GRIDLEDGER_KAFKA_SSL_* files are set but GRIDLEDGER_KAFKA_SECURITY_PROTOCOL is "
                f"{protocol}: set it to SSL or SASL_SSL, or the files are not used"
            )
        if self.kafka_ssl_keyfile and not self.kafka_ssl_certfile:
            raise ValueError("GRIDLEDGER_KAFKA_SSL_KEYFILE needs GRIDLEDGER_KAFKA_SSL_CERTFILE")
        if self.pg_sslrootcert and self.pg_sslmode not in {"verify-ca", "verify-full"}:
            raise ValueError(
                "GRIDLEDGER_PG_SSLROOTCERT is only used with GRIDLEDGER_PG_SSLMODE=verify-ca "
                "or verify-full"
            )
        return self

    def webhooks_backoff(self) -> Backoff:
        """The wait before a failing webhook subscription's next delivery attempt."""
        return Backoff(
            self.webhooks_backoff_initial_s,
            max(self.webhooks_backoff_cap_s, self.webhooks_backoff_initial_s),
        )

    def reconnect_backoff(self) -> Backoff:
        """The backoff every service uses to reconnect to the broker and Postgres."""
        return Backoff(
            self.reconnect_initial_s, max(self.reconnect_max_s, self.reconnect_initial_s)
        )

    @property
    def replication_factor(self) -> int:
        """Replicas of every new topic: the explicit setting, else up to 3 local brokers."""
        return self.topic_replication or min(3, self.kafka_brokers)

    @property
    def min_insync_replicas(self) -> int:
        """Replicas an ``acks=all`` append waits for: 2 of 3, so one broker may die.

        One less than the replication (never below 1, never above 2): with 3 replicas
        an append survives the loss of any one broker and still refuses to be
        acknowledged by a lone survivor that could lose it.
        """
        return max(1, min(2, self.replication_factor - 1))

    def topic(self, name: str) -> str:
        """Full topic name for a suffix from :data:`schemas.topics.TOPIC_NAMES`."""
        if name not in TOPIC_NAMES:
            raise ValueError(f"unknown topic {name!r}; expected one of {', '.join(TOPIC_NAMES)}")
        return f"{self.topic_prefix}{name}"

    @property
    def dsn(self) -> str:
        """Where Postgres is: ``pg_dsn``, else the local one `dev up` starts."""
        return self.pg_dsn or f"postgresql://gridledger@127.0.0.1:{self.pg_port}/gridledger"

    @property
    def dsn_redacted(self) -> str:
        """The DSN without its password, for logs and error messages."""
        return redact_dsn(self.dsn)

    @property
    def tokens_path(self) -> Path:
        """The API's tokens file: ``tokens_file``, else the one `dev up` writes in the home."""
        return self.tokens_file or self.home / "tokens.json"

    @property
    def logs_dir(self) -> Path:
        """Where the stack's and the services' logs go, under the home."""
        return self.home / "logs"

    @property
    def notary_key_path(self) -> Path:
        """The notary's signing key: ``notary_key_file``, else ``<home>/notary/notary.key``."""
        return self.notary_key_file or self.home / "notary" / "notary.key"

    @property
    def notary_keys_path(self) -> Path:
        """The folder of accepted public keys: ``notary_keys_dir``, else ``<home>/notary/keys``."""
        return self.notary_keys_dir or self.home / "notary" / "keys"

    @property
    def s3_url(self) -> str:
        """The S3 endpoint clients use: ``s3_endpoint``, else the local SeaweedFS."""
        return self.s3_endpoint or f"http://127.0.0.1:{self.s3_port}"

    @property
    def s3_credentials_path(self) -> Path:
        """The S3 credentials file: ``s3_credentials_file``, else the one `dev up` writes."""
        return self.s3_credentials_file or self.home / "s3-credentials.json"


def redact_dsn(dsn: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``."""
    return re.sub(r"://([^:@/]+):[^@/]*@", r"://\1:***@", dsn)


def _read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def load_settings(**overrides: object) -> Settings:
    """Build settings from ``<home>/stack.env``, then the environment, then ``overrides``."""
    home = default_home()
    file_values = {
        key.removeprefix("GRIDLEDGER_").lower(): value
        for key, value in _read_env_file(home / "stack.env").items()
        if key.startswith("GRIDLEDGER_") and key not in os.environ
    }
    return Settings(**{**file_values, **overrides})  # type: ignore[arg-type]
