"""The topics: one table, from which every list of topic suffixes is derived.

A topic's full name is ``topic_prefix + suffix`` (``Settings.topic``). Each row says
how the topic is keyed and kept and who reads it; the lists the services, the topic
creation (:mod:`services.ledger.topics`) and the tools use are derived from these
rows below, so a new topic or a changed rule is one row. The subscriber distribution
(``client/``) installs alone and keeps its own list of what a subscriber may read;
``tests/schemas/test_topics.py`` checks it against :data:`SUBSCRIBABLE_TOPICS`.
docs/architecture.md, "Topics and keys", says why each topic is as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Key = Literal["job", "node", "one"]
"""How records are spread: by job id, by node id (each its own count of partitions), or
on one partition (low volume, read whole, in arrival order)."""

Kind = Literal["history", "view", "command", "internal"]
"""``history``: facts and decisions, appended and never changed; ``view``: the latest
derived record per job (compacted, rebuildable from the history); ``command``: orders
to one node; ``internal``: the platform's own records (dead letters, seals, prices, the
schedulers' lease and snapshot)."""


@dataclass(frozen=True)
class Topic:
    """One topic: its suffix, key and kind, and the rules that single it out."""

    suffix: str
    key: Key
    kind: Kind
    broker_time: bool = False
    """Records carry the broker's append time, not the producer's clock: the watchdog
    judges an agent's silence, and the scheduler a node's liveness, by when the platform
    heard it (docs/watchdog.md)."""
    kept_forever: bool = False
    """No retention may shorten it: a seal proves nothing once it is gone, the price book
    is folded from every version, and the schedulers' lease claims' offsets are the
    leader epochs (a few records per takeover)."""
    sealed: bool = False
    """The notary seals it (README "Audit"): the facts and decisions and what the user and
    billing see of a job. Not the compacted views (compaction removes records by design;
    they are rebuilt from the history), not heartbeats (liveness only, the largest
    stream), not the notary's own ``ledger-seals``."""
    stored: bool = False
    """The sink keeps its records in the Postgres read models."""
    folded: bool = False
    """A job's fold reads it: the job state and accounting, live and in replay."""
    latest_only: bool = False
    """An internal topic the broker compacts like a view: the scheduler's snapshot, whose
    newest parts are all a start reads (:mod:`services.scheduler.snapshot`)."""

    @property
    def compacted(self) -> bool:
        """Whether the broker keeps only the latest record per key."""
        return self.kind == "view" or self.latest_only

    @property
    def subscribable(self) -> bool:
        """Whether another team's subscriber may read it (``client/``)."""
        return self.kind in ("history", "view")


TOPICS = (
    Topic("job-events", "job", "history", broker_time=True, sealed=True, stored=True, folded=True),
    Topic("node-events", "node", "history", broker_time=True, stored=True),
    Topic("heartbeats", "job", "history", broker_time=True),
    Topic("log-chunks", "job", "history", sealed=True, stored=True),
    Topic("meter-ticks", "job", "history", sealed=True, stored=True, folded=True),
    Topic("node-commands", "node", "command"),
    Topic("job-state", "job", "view"),
    Topic("accounting", "job", "view"),
    Topic("dead-letter", "one", "internal"),
    Topic("ledger-seals", "one", "internal", kept_forever=True),
    Topic("prices", "one", "internal", kept_forever=True, stored=True),
    Topic("scheduler-lease", "one", "internal", kept_forever=True),
    Topic("scheduler-state", "one", "internal", latest_only=True),
)

BY_SUFFIX = {topic.suffix: topic for topic in TOPICS}

TOPIC_NAMES = tuple(BY_SUFFIX)
"""Every topic suffix, in the table's order."""
COMPACTED_TOPICS = frozenset(t.suffix for t in TOPICS if t.compacted)
NODE_KEYED_TOPICS = frozenset(t.suffix for t in TOPICS if t.key == "node")
SINGLE_PARTITION = frozenset(t.suffix for t in TOPICS if t.key == "one")
BROKER_TIMED = frozenset(t.suffix for t in TOPICS if t.broker_time)
KEPT_FOREVER = frozenset(t.suffix for t in TOPICS if t.kept_forever)
SEALED_TOPICS = tuple(t.suffix for t in TOPICS if t.sealed)
STORED_TOPICS = tuple(t.suffix for t in TOPICS if t.stored)
"""What the sink consumes and replay's verify re-applies."""
FOLDED_TOPICS = tuple(t.suffix for t in TOPICS if t.folded)
HISTORY_TOPICS = tuple(t.suffix for t in TOPICS if t.kind == "history")
SUBSCRIBABLE_TOPICS = tuple(t.suffix for t in TOPICS if t.subscribable)
