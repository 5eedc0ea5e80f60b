"""Every gridledger metric, defined once, in the process-wide prometheus-client registry.

Each service exports only what it updates; a metric a process never touches has
no samples there (labelled metrics) or stays at zero. Names and labels are the
contract of ``deploy/grafana/gridledger.json``.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

JOBS = Gauge(
    "gridledger_jobs",
    "Jobs in the read models by current status (sink, refreshed at each scrape)",
    ["status"],
)
ATTEMPT_FAILURES = Gauge(
    "gridledger_attempt_failures",
    "Attempts in the read models by failure class and side (sink, refreshed at each scrape)",
    ["failure_class", "attribution"],
)
EVENTS_CONSUMED = Counter(
    "gridledger_events_consumed",
    "Records this process consumed and decoded, by topic",
    ["topic"],
)
EVENTS_PRODUCED = Counter(
    "gridledger_events_produced",
    "Records this process appended and the broker acknowledged, by topic",
    ["topic"],
)
DEAD_LETTERS = Counter(
    "gridledger_dead_letters",
    "Records this process parked on the dead-letter topic and went on, by consumer and "
    "reason (undecodable, unstorable, unpublishable, unapplicable)",
    ["consumer", "reason"],
)
RECORDS_SKIPPED = Counter(
    "gridledger_records_skipped",
    "Undecodable records a reader that only looks (follow, history, replay) skipped; the "
    "topic's owner dead-letters them",
    ["consumer"],
)
SEALS = Counter(
    "gridledger_seals",
    "Seals the notary signed and appended to ledger-seals, by sealed topic",
    ["topic"],
)
WEBHOOK_DELIVERIES = Counter(
    "gridledger_webhook_deliveries",
    "Webhook delivery attempts, by outcome (delivered: a 2xx; failed: anything else)",
    ["outcome"],
)
CONSUMER_LAG = Gauge(
    "gridledger_consumer_lag",
    "Records between this consumer's position and the partition's end",
    ["topic", "partition"],
)
DECISION_LATENCY = Histogram(
    "gridledger_decision_latency_seconds",
    "From the broker timestamp of the newest record of a batch that led to decisions "
    "(processors: derived events, node commands; scheduler: placements, rejections), "
    "to the acknowledged append of those decisions",
    ["decider"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SPOOL_DEPTH = Gauge(
    "gridledger_agent_spool_bytes",
    "Bytes written to the agent's spool that the broker has not acknowledged yet",
    ["lane"],
)
UPLOAD_BYTES = Counter(
    "gridledger_upload_bytes",
    "Artifact bytes (outputs and checkpoints) the agent stored",
)
API_REQUEST_SECONDS = Histogram(
    "gridledger_api_request_seconds",
    "API request latency by route template, method and status",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CHECK_OK = Gauge(
    "gridledger_check_ok",
    "1 when a readiness check passed at its last run, 0 when it failed",
    ["check"],
)

__all__ = [
    "API_REQUEST_SECONDS",
    "ATTEMPT_FAILURES",
    "CHECK_OK",
    "CONSUMER_LAG",
    "DEAD_LETTERS",
    "DECISION_LATENCY",
    "EVENTS_CONSUMED",
    "EVENTS_PRODUCED",
    "JOBS",
    "RECORDS_SKIPPED",
    "REGISTRY",
    "SPOOL_DEPTH",
    "UPLOAD_BYTES",
]


def count_by_topic(counter: Counter, counts: dict[str, int]) -> None:
    """Add per-topic counts gathered over a batch (one label lookup per topic, not per record)."""
    for topic, n in counts.items():
        if n:
            counter.labels(topic=topic).inc(n)
